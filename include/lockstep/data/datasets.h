// Built-in datasets (keras.datasets), read from files on this machine —
// nothing is downloaded.
//
//   auto [train, test] = ls::datasets::fashion_mnist::load_data();
//   auto [x_train, y_train] = train;   // uint8 [60000, 28, 28], uint8 [60000]
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "lockstep/tensor/tensor.h"

namespace lockstep::datasets {

using Split = std::pair<Tensor, Tensor>;  // (images, labels)

namespace fashion_mnist {
// Where Debian's dataset-fashion-mnist package puts the files.
inline constexpr const char* kDefaultDir = "/usr/share/datasets/fashion-mnist";
// ((x_train, y_train), (x_test, y_test)) from `dir`, which holds
// {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]. If the files are
// missing the IOError names the paths tried and how to install them.
std::pair<Split, Split> load_data(const std::string& dir = kDefaultDir);

// An image folder made from Fashion-MNIST, for image_dataset_from_directory:
// two classes, `footwear/` (Sandal 5, Sneaker 7, Ankle boot 9) and `other/`,
// each image upscaled (bilinear) to image_size x image_size, made RGB and
// written as a JPEG named <split>_<index>.jpg. Existing files are replaced.
struct ImageFolderOptions {
  std::string split = "train";           // "train" (60,000 images) or "test" (10,000)
  std::int64_t image_size = 96;          // side of the square images, in pixels
  std::int64_t count = 0;                // the first `count` images of the split; 0: all
  int quality = 95;                      // JPEG quality
  std::string source_dir = kDefaultDir;  // where the IDX files are
  int threads = 0;                       // encoding threads; 0: one per core
};
struct ImageFolderCounts {
  std::int64_t footwear = 0, other = 0;
};
ImageFolderCounts write_image_folder(const std::string& dir,
                                     const ImageFolderOptions& options = {});
}  // namespace fashion_mnist

namespace mnist {
// The same layout, from a directory the user provides.
std::pair<Split, Split> load_data(const std::string& dir);
}  // namespace mnist

}  // namespace lockstep::datasets
