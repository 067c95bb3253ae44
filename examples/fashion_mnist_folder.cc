// Writes an image folder from Fashion-MNIST for image_dataset_from_directory:
// footwear/ (Sandal, Sneaker, Ankle boot) and other/, as RGB JPEGs.
//
//   fashion_mnist_folder DIR [--split train|test] [--size 96] [--count N] [--quality 95]
//
// The whole training split (60,000 images at 96 x 96, 237 MB) took 65 s
// here (2 cores shared with other jobs; 28 s of CPU); --count N writes only
// the first N images (the test writes 40). The data comes from Debian's
// dataset-fashion-mnist package.
#include <cstdio>
#include <cstring>
#include <string>

#include "lockstep/lockstep.h"

namespace ls = lockstep;

int main(int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') {
    std::fprintf(stderr,
                 "usage: %s DIR [--split train|test] [--size 96] [--count N] [--quality 95]\n",
                 argv[0]);
    return 2;
  }
  ls::datasets::fashion_mnist::ImageFolderOptions options;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--split") {
      options.split = value;
    } else if (flag == "--size") {
      options.image_size = std::stoll(value);
    } else if (flag == "--count") {
      options.count = std::stoll(value);
    } else if (flag == "--quality") {
      options.quality = std::stoi(value);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  try {
    const auto counts = ls::datasets::fashion_mnist::write_image_folder(argv[1], options);
    std::printf("Wrote %lld footwear and %lld other images (%lldx%lld RGB JPEG) to %s\n",
                static_cast<long long>(counts.footwear), static_cast<long long>(counts.other),
                static_cast<long long>(options.image_size),
                static_cast<long long>(options.image_size), argv[1]);
  } catch (const ls::Error& e) {
    std::fprintf(stderr, "fashion_mnist_folder: %s\n", e.what());
    return 1;
  }
  return 0;
}
