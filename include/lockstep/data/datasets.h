// Built-in datasets (keras.datasets), read from files on this machine —
// nothing is downloaded.
//
//   auto [train, test] = ls::datasets::fashion_mnist::load_data();
//   auto [x_train, y_train] = train;   // uint8 [60000, 28, 28], uint8 [60000]
#pragma once

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
}  // namespace fashion_mnist

namespace mnist {
// The same layout, from a directory the user provides.
std::pair<Split, Split> load_data(const std::string& dir);
}  // namespace mnist

}  // namespace lockstep::datasets
