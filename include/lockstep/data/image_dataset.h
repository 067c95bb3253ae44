// Images from a folder: keras.utils.image_dataset_from_directory.
//
//   // flowers/daisy/*.jpg, flowers/roses/*.jpg, ...
//   auto train = ls::data::image_dataset_from_directory("flowers",
//       {.image_size = {180, 180}, .batch_size = 32, .seed = 123,
//        .validation_split = 0.2, .subset = "training"});
//   // Found 3670 files belonging to 5 classes.
//   // Using 2936 files for training.
//   train.class_names();  // {"daisy", "dandelion", "roses", "sunflowers", "tulips"}
//   model.fit(train.prefetch(ls::data::kAutotune), {.epochs = 3});
//
// Keras's semantics exactly: the class names are the sorted subfolder names
// (hidden ones skipped); each class folder is walked recursively, files in
// sorted order, keeping .bmp .gif .jpeg .jpg .png (any case); the list is
// shuffled with NumPy's RandomState(seed) — the same order Keras gives —
// before the validation split takes its last int(validation_split * N)
// files; the same lines are printed. The dataset then shuffles (a buffer of
// 8 batches, reshuffled each epoch), decodes and resizes the images in
// parallel under AUTOTUNE, batches and prefetches. See docs/data.md for the
// few differences (an empty class folder and a split that leaves a subset
// empty are errors; BMP and GIF files are refused when read).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/data/dataset.h"

namespace lockstep::data {

// What image_dataset_from_directory does to each file (Keras's
// _load_image_tf): decode to `channels`, then resize to `image_size` —
// stretched, or the largest centred crop of the target's aspect ratio
// (crop_to_aspect_ratio, keras.preprocessing.image.smart_resize), or
// resized to fit and padded with zeros (pad_to_aspect_ratio,
// tf.image.resize_with_pad). float32 [h, w, channels] in 0..255; uint8
// with "nearest" interpolation (TensorFlow's resize keeps the dtype then).
struct LoadImageOptions {
  std::array<std::int64_t, 2> image_size{256, 256};  // (height, width)
  int channels = 3;                                  // 1, 3 or 4
  std::string interpolation = "bilinear";            // or "nearest"
  bool crop_to_aspect_ratio = false;
  bool pad_to_aspect_ratio = false;
};
Tensor load_image(const std::string& path, const LoadImageOptions& options = {});

// Keras's `labels` argument: "inferred" (from the class folders), an
// explicit list (one integer per file, in the sorted order of the file
// paths), or std::nullopt (Keras's None: images only).
class ImageLabels {
 public:
  ImageLabels(const char* mode) : mode_(mode) {}             // NOLINT: "inferred"
  ImageLabels(std::string mode) : mode_(std::move(mode)) {}  // NOLINT
  ImageLabels(std::vector<std::int64_t> list) : mode_("list"), list_(std::move(list)) {}  // NOLINT
  ImageLabels(std::initializer_list<std::int64_t> list) : ImageLabels(std::vector(list)) {}
  ImageLabels(std::nullopt_t) : mode_("none") {}  // NOLINT

  // "inferred", "list", "none", or what the caller wrote (refused when used).
  const std::string& mode() const { return mode_; }
  const std::vector<std::int64_t>& list() const { return list_; }

 private:
  std::string mode_;
  std::vector<std::int64_t> list_;
};

struct ImageDatasetOptions {
  ImageLabels labels = "inferred";
  // "int" (int32 [batch]), "categorical" (float32 one-hot [batch, classes]),
  // "binary" (float32 [batch, 1], exactly two classes), or std::nullopt (no
  // labels: the elements are the images alone).
  std::optional<std::string> label_mode = "int";
  // The classes and their order (a subset of the subfolders); empty: all
  // subfolders, sorted. Only with labels "inferred".
  std::vector<std::string> class_names{};
  std::string color_mode = "rgb";  // "rgb", "grayscale" or "rgba"
  // Elements are batches of this size; std::nullopt: single images.
  std::optional<std::int64_t> batch_size = 32;
  std::array<std::int64_t, 2> image_size{256, 256};  // (height, width)
  bool shuffle = true;
  // Keras's seed (0 .. 2^32 - 1); none: drawn at random, as Keras does.
  std::optional<std::uint64_t> seed{};
  double validation_split = 0.0;  // in (0, 1); 0: no split
  // "training", "validation" (with validation_split), or "" for all files;
  // "both" is image_dataset_from_directory_split's.
  std::string subset{};
  std::string interpolation = "bilinear";  // "bilinear" or "nearest"
  bool follow_links = false;               // descend into symlinked folders
  bool crop_to_aspect_ratio = false;
  bool pad_to_aspect_ratio = false;
  bool verbose = true;  // print "Found N files belonging to C classes."
  // Where the lines go; nullptr: std::cout.
  std::ostream* out = nullptr;
  // Lockstep's addition: the parallel map's workers (Keras always autotunes).
  std::int64_t num_parallel_calls = kAutotune;
};

// A Dataset of images (and labels) that also knows its classes and files.
// Transformations (prefetch, map, ...) return plain Datasets, as tf.data's
// lose Keras's attributes.
class ImageDataset : public Dataset {
 public:
  ImageDataset() = default;
  ImageDataset(Dataset dataset, std::vector<std::string> class_names,
               std::vector<std::string> file_paths)
      : Dataset(std::move(dataset)),
        class_names_(std::move(class_names)),
        file_paths_(std::move(file_paths)) {}
  // Label i's class (empty without labels; "0", "1", ... for explicit lists).
  const std::vector<std::string>& class_names() const { return class_names_; }
  // The files, in the order of the dataset before its per-epoch shuffle.
  const std::vector<std::string>& file_paths() const { return file_paths_; }

 private:
  std::vector<std::string> class_names_;
  std::vector<std::string> file_paths_;
};

// subset "", "training" or "validation". An IOError names a missing folder;
// a ValueError an argument Keras refuses, a folder without images, or an
// empty subset.
ImageDataset image_dataset_from_directory(const std::string& directory,
                                          const ImageDatasetOptions& options = {});

// subset "both" (or ""): the training and the validation datasets of one
// split, as Keras returns for subset="both". The validation one is never
// shuffled.
std::pair<ImageDataset, ImageDataset> image_dataset_from_directory_split(
    const std::string& directory, const ImageDatasetOptions& options);

}  // namespace lockstep::data
