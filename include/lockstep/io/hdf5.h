// HDF5 files as a tree in memory: Keras's weights files (`.weights.h5`, the
// `model.weights.h5` inside a `.keras` archive, and Keras 2's legacy `.h5`).
//
// The one adapter of Debian's libhdf5 (its C API). A file is read whole into
// an H5Group — groups, datasets as Tensors, attributes — and validated there,
// so a caller matches a model against the file before it changes anything;
// writing builds the file image in memory (HDF5's core driver) and hands it
// to atomic_write, so a crash leaves the old file or the new one.
//
// What is read: groups, datasets of float (16/32/64-bit, read as float32,
// as Keras reads them into float32 variables), signed integers (int32 and
// int64 kept, narrower ones read as int32), uint8 and bool (h5py's enum),
// and attributes holding strings, lists of strings, or numbers. Anything
// else (compound types, references, external links) is an IOError naming
// the file and the object's path.
#pragma once

#include <map>
#include <string>
#include <variant>
#include <vector>

#include "lockstep/core/isolated.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep::io {

// An attribute: one string, a list of strings, or numbers (as double).
using H5Attribute = std::variant<std::string, std::vector<std::string>, std::vector<double>>;

struct H5Group {
  // By name (HDF5 itself lists links by name unless told otherwise).
  std::map<std::string, H5Group> groups{};
  std::map<std::string, Tensor> datasets{};
  std::map<std::string, H5Attribute> attributes{};

  // The group at a '/'-separated path below this one (created on the way).
  H5Group& group(const std::string& path);
  // Lookups by '/'-separated path; nullptr when absent.
  const H5Group* find_group(const std::string& path) const;
  const Tensor* find_dataset(const std::string& path) const;
  // A string attribute (a one-element string list counts); nullptr when
  // absent or not a string.
  const std::string* string_attribute(const std::string& name) const;
};

// The bytes of an HDF5 file holding `root` (what write_h5 stores).
std::string h5_file_image(const H5Group& root);
// Writes `root` to `path` atomically.
void write_h5(const std::string& path, const H5Group& root);

// Reads a whole HDF5 file; `source` names it in errors (a path, or
// "m.keras: model.weights.h5"). An IOError names the source and the object
// when the bytes are not HDF5, are damaged, or hold what we cannot read.
//
// Untrusted bytes never reach libhdf5 in the caller's process: it reads
// them in a child (core/isolated.h), under h5_read_limits, and a crash or an
// endless loop there is an IOError naming the file. What one file may make
// us allocate is bounded by its FileBudget (core/checked.h); a group reached
// by two links (a cycle), groups nested past 64 levels and a dataset whose
// values were never stored are refused.
H5Group read_h5(const std::string& path);
H5Group read_h5_image(const std::string& bytes, const std::string& source);
H5Group read_h5_image(const std::string& bytes, const std::string& source,
                      const IsolationLimits& limits);

// The reader's limits for a file of `file_bytes`: memory twice its budget
// plus 256 MiB, 10 CPU seconds plus one per 64 MiB, six times that in wall
// time.
IsolationLimits h5_read_limits(std::uint64_t file_bytes);

// The same reading in the caller's own process: for the benchmark that
// measures what the isolation costs, never for a file from outside.
H5Group read_h5_image_in_process(const std::string& bytes, const std::string& source);

// Whether these bytes start with HDF5's signature (at offset 0: files we and
// h5py write have no user block).
bool looks_like_h5(const std::string& first_bytes);

}  // namespace lockstep::io
