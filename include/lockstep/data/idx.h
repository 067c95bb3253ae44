// IDX files (the MNIST / Fashion-MNIST format), plain or gzip-compressed.
//
// Layout: two zero bytes, a type byte (0x08 uint8, 0x09 int8, 0x0B int16,
// 0x0C int32, 0x0D float32, 0x0E float64), a rank byte, one big-endian
// uint32 per dimension, then the values, big-endian.
#pragma once

#include <string>

#include "lockstep/tensor/tensor.h"

namespace lockstep::data {

// Reads a whole IDX file (".gz" or not: detected from the content). uint8
// stays uint8; int8/int16/int32 become int32; float32/float64 become
// float32. A truncated or corrupt file is an IOError naming the file, the
// byte offset and what the header promised.
Tensor read_idx(const std::string& path);

}  // namespace lockstep::data
