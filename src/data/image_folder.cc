// fashion_mnist::write_image_folder (data/datasets.h): Fashion-MNIST as an
// image folder of two classes, footwear against the rest, in JPEG — the
// input of the fine-tuning example (issue #19) and of the image benchmarks.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "lockstep/data/datasets.h"
#include "lockstep/data/image.h"
#include "lockstep/tensor/image_ops.h"
#include "lockstep/tensor/ops.h"

namespace lockstep::datasets {
namespace {

namespace fs = std::filesystem;

bool is_footwear(int label) { return label == 5 || label == 7 || label == 9; }

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  LOCKSTEP_CHECK_AS(IOError, out.good(), "write_image_folder: could not write '", path.string(),
                    "'. Hint: check the free space and permissions of the folder");
}

}  // namespace

fashion_mnist::ImageFolderCounts fashion_mnist::write_image_folder(const std::string& dir,
                                                                   const ImageFolderOptions& o) {
  LOCKSTEP_CHECK(o.split == "train" || o.split == "test",
                 "write_image_folder: split must be \"train\" or \"test\", got \"", o.split, "\"");
  LOCKSTEP_CHECK(o.image_size > 0, "write_image_folder: image_size must be > 0, got ",
                 o.image_size);
  LOCKSTEP_CHECK(o.count >= 0, "write_image_folder: count must be >= 0, got ", o.count);
  const auto [train, test] = load_data(o.source_dir);
  const Split& s = o.split == "train" ? train : test;
  const std::int64_t n = o.count == 0 ? s.first.dim(0) : std::min(o.count, s.first.dim(0));
  const fs::path root(dir);
  for (const char* cls : {"footwear", "other"}) {
    std::error_code ec;
    fs::create_directories(root / cls, ec);
    LOCKSTEP_CHECK_AS(IOError, !ec, "write_image_folder: could not create '", (root / cls).string(),
                      "': ", ec.message());
  }
  const std::vector<std::uint8_t> labels = s.second.to_vector<std::uint8_t>();
  const int threads = o.threads > 0
                          ? o.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::exception_ptr failure;
  std::mutex failure_mu;
  auto work = [&](int t) {
    omp_set_num_threads(
        1);  // many small images: one intra-op thread per worker (as data/parallel.cc)
    try {
      for (std::int64_t i = t; i < n; i += threads) {
        const Tensor gray = reshape(s.first.view_rows(i, i + 1), {28, 28, 1});
        const Tensor big = image::resize(gray, {o.image_size, o.image_size});
        const Tensor rgb =
            cast(clip(concat({big, big, big}, 2), 0.0f, 255.0f) + 0.5f, DType::kUInt8);
        const bool footwear = is_footwear(labels[static_cast<std::size_t>(i)]);
        char name[32];
        std::snprintf(name, sizeof(name), "%s_%05lld.jpg", o.split.c_str(),
                      static_cast<long long>(i));
        write_file(root / (footwear ? "footwear" : "other") / name,
                   data::encode_jpeg(rgb, {.quality = o.quality}));
      }
    } catch (...) {
      std::lock_guard lock(failure_mu);
      if (!failure) failure = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(work, t);
  for (auto& th : pool) th.join();
  if (failure) std::rethrow_exception(failure);
  ImageFolderCounts counts;
  for (std::int64_t i = 0; i < n; ++i) {
    (is_footwear(labels[static_cast<std::size_t>(i)]) ? counts.footwear : counts.other) += 1;
  }
  return counts;
}

}  // namespace lockstep::datasets
