// MNIST-layout datasets from local files.
#include "lockstep/data/datasets.h"

#include <filesystem>

#include "lockstep/data/idx.h"

namespace lockstep::datasets {
namespace {

std::string find(const std::string& dir, const std::string& stem, const std::string& hint) {
  for (const std::string& candidate : {dir + "/" + stem + ".gz", dir + "/" + stem}) {
    if (std::filesystem::exists(candidate)) return candidate;
  }
  detail::throw_error<IOError>("dataset file not found: tried ", dir, "/", stem, ".gz and ", dir,
                               "/", stem, ". ", hint);
}

std::pair<Split, Split> load_layout(const std::string& dir, const std::string& hint) {
  auto load = [&](const std::string& images, const std::string& labels) {
    Tensor x = data::read_idx(find(dir, images, hint));
    Tensor y = data::read_idx(find(dir, labels, hint));
    LOCKSTEP_CHECK_AS(IOError, x.rank() == 3 && y.rank() == 1 && x.shape()[0] == y.shape()[0], dir,
                      "/", images, ": expected images [n, rows, cols] and labels [n], got ",
                      x.shape(), " and ", y.shape());
    return Split{x, y};
  };
  return {load("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
          load("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")};
}

}  // namespace

std::pair<Split, Split> fashion_mnist::load_data(const std::string& dir) {
  return load_layout(dir,
                     "Hint: install Debian's dataset-fashion-mnist package (apt-get install "
                     "dataset-fashion-mnist; scripts/install-deps.sh does), or pass the directory "
                     "that holds the files.");
}

std::pair<Split, Split> mnist::load_data(const std::string& dir) {
  return load_layout(dir, "Hint: the directory must hold MNIST's four IDX files.");
}

}  // namespace lockstep::datasets
