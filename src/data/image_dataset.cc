// image_dataset_from_directory and load_image (data/image_dataset.h):
// Keras's keras/src/utils/image_dataset_utils.py and dataset_utils.py,
// step for step — the argument checks, the index of the folder (class
// folders, the walk, the allowed extensions), NumPy's shuffle of the file
// list, the split, the printed lines — then a Dataset that shuffles,
// decodes and resizes in parallel, batches and prefetches.
#include "lockstep/data/image_dataset.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <random>
#include <set>

#include "lockstep/core/error.h"
#include "lockstep/core/log.h"
#include "lockstep/data/image.h"
#include "lockstep/tensor/image_ops.h"
#include "lockstep/tensor/ops.h"

namespace lockstep::data {
namespace {

namespace fs = std::filesystem;

constexpr const char* kAllowedFormats = "(.bmp, .gif, .jpeg, .jpg, .png)";

bool allowed_extension(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* ext : {".bmp", ".gif", ".jpeg", ".jpg", ".png"}) {
    const std::string e(ext);
    if (lower.size() >= e.size() && lower.compare(lower.size() - e.size(), e.size(), e) == 0)
      return true;
  }
  return false;
}

// ---- NumPy's legacy RandomState(seed).shuffle, which Keras shuffles the file
// list with: MT19937 seeded as numpy's mt19937_seed (which is
// std::mt19937's seeding), Fisher-Yates from the end with numpy's
// random_interval (rejection sampling under a bit mask).

std::uint32_t random_interval(std::mt19937& gen, std::uint32_t max) {
  if (max == 0) return 0;
  std::uint32_t mask = max;
  for (int shift : {1, 2, 4, 8, 16}) mask |= mask >> shift;
  std::uint32_t value;
  while ((value = static_cast<std::uint32_t>(gen()) & mask) > max) {
  }
  return value;
}

template <typename T>
void numpy_shuffle(std::vector<T>& x, std::uint64_t seed) {
  std::mt19937 gen(static_cast<std::uint32_t>(seed));
  for (std::size_t i = x.size(); i-- > 1;) {
    std::swap(x[i], x[random_interval(gen, static_cast<std::uint32_t>(i))]);
  }
}

// ---- the index of the folder (dataset_utils.index_directory) ----

struct Index {
  std::vector<std::string> file_paths;
  std::vector<std::int64_t> labels;  // empty without labels
  std::vector<std::string> class_names;
};

// The entries of folder `dir`; an IOError naming it when it cannot be listed.
std::vector<fs::directory_entry> list_folder(const fs::path& dir) {
  try {
    return {fs::directory_iterator(dir), fs::directory_iterator()};
  } catch (const fs::filesystem_error& e) {
    detail::throw_error<IOError>("image_dataset_from_directory: cannot list '", dir.string(),
                                 "': ", e.code().message());
  }
}

// os.walk(top + rel, followlinks): each folder's path and its file names
// (sorted), depth first; the caller sorts the folders as Keras does.
// Entries are classified following symlinks (as os.walk does); symlinked
// folders are entered only with follow_links, and a folder already entered
// (a symlink cycle) is not entered again.
void walk(const fs::path& top, const fs::path& rel, bool follow_links, std::set<fs::path>& entered,
          std::vector<std::pair<std::string, std::vector<std::string>>>& out) {
  std::error_code ec;
  const fs::path canonical = fs::canonical(top / rel, ec);
  if (ec || !entered.insert(canonical).second) return;
  std::vector<std::string> files;
  std::vector<std::string> dirs;
  for (const fs::directory_entry& e : list_folder(top / rel)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory(ec)) {
      if (follow_links || !e.is_symlink(ec)) dirs.push_back(name);
    } else {
      files.push_back(name);
    }
  }
  std::sort(files.begin(), files.end());
  out.emplace_back((top / rel).string(), std::move(files));
  for (const std::string& d : dirs) walk(top, rel / d, follow_links, entered, out);
}

Index index_directory(const std::string& directory, const ImageDatasetOptions& o,
                      std::ostream& out) {
  std::error_code ec;
  LOCKSTEP_CHECK_AS(IOError, fs::exists(directory, ec),
                    "image_dataset_from_directory: the folder '", directory,
                    "' does not exist. Hint: check the path (relative paths start from ",
                    fs::current_path(ec).string(), ")");
  LOCKSTEP_CHECK_AS(IOError, fs::is_directory(directory, ec), "image_dataset_from_directory: '",
                    directory, "' is not a folder");
  const std::string& mode = o.labels.mode();
  Index index;
  std::vector<std::string> subdirs;
  if (mode == "inferred") {
    for (const fs::directory_entry& e : list_folder(directory)) {
      const std::string name = e.path().filename().string();
      if (e.is_directory(ec) && !name.starts_with(".")) subdirs.push_back(name);
    }
    std::sort(subdirs.begin(), subdirs.end());
    if (!o.class_names.empty()) {
      for (const std::string& c : o.class_names) {
        if (std::find(subdirs.begin(), subdirs.end(), c) == subdirs.end()) {
          std::string have;
          for (const auto& s : subdirs) have += (have.empty() ? "" : ", ") + s;
          detail::throw_error<ValueError>(
              "image_dataset_from_directory: class_names must name subfolders of '", directory,
              "'; '", c, "' is not one. Expected a subset of: ", have);
        }
      }
      subdirs = o.class_names;
    }
    LOCKSTEP_CHECK(!subdirs.empty(), "image_dataset_from_directory: '", directory,
                   "' has no class subfolders (labels \"inferred\" takes one class per subfolder). "
                   "Hint: put the images in one folder per class, or pass .labels = std::nullopt");
  } else {
    LOCKSTEP_CHECK(o.class_names.empty(),
                   "image_dataset_from_directory: class_names cannot be "
                   "given without labels (labels or label_mode is std::nullopt)");
    subdirs = {""};
  }
  for (std::size_t label = 0; label < subdirs.size(); ++label) {
    std::vector<std::pair<std::string, std::vector<std::string>>> folders;
    std::set<fs::path> entered;
    const fs::path top = fs::path(directory) / subdirs[label];
    walk(top, "", o.follow_links, entered, folders);
    std::sort(folders.begin(), folders.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [root, files] : folders) {
      for (const std::string& f : files) {
        if (!allowed_extension(f)) continue;
        index.file_paths.push_back((fs::path(root) / f).string());
        index.labels.push_back(static_cast<std::int64_t>(label));
      }
    }
  }
  const std::size_t n = index.file_paths.size();
  if (mode == "inferred") {
    // Keras lets a class folder without images through (a class no label
    // ever takes); Lockstep refuses it, as the likelier mistake.
    for (std::size_t label = 0; label < subdirs.size() && n > 0; ++label) {
      const bool empty = std::find(index.labels.begin(), index.labels.end(),
                                   static_cast<std::int64_t>(label)) == index.labels.end();
      LOCKSTEP_CHECK(!empty, "image_dataset_from_directory: the class folder '",
                     (fs::path(directory) / subdirs[label]).string(),
                     "' holds no images (allowed formats: ", kAllowedFormats,
                     "). Hint: add its images, remove the folder, or list the classes to use "
                     "in class_names");
    }
    index.class_names = subdirs;
  } else if (mode == "list") {
    LOCKSTEP_CHECK(o.labels.list().size() == n,
                   "image_dataset_from_directory: expected one label per file; got ",
                   o.labels.list().size(), " labels for the ", n, " files in '", directory, "'");
    index.labels = o.labels.list();
    for (std::int64_t l : std::set<std::int64_t>(index.labels.begin(), index.labels.end())) {
      index.class_names.push_back(std::to_string(l));
    }
  } else {
    index.labels.clear();
  }
  if (o.verbose) {
    if (mode == "none") {
      out << "Found " << n << " files." << std::endl;
    } else {
      out << "Found " << n << " files belonging to " << index.class_names.size() << " classes."
          << std::endl;
    }
  }
  if (o.shuffle) {
    numpy_shuffle(index.file_paths, *o.seed);
    numpy_shuffle(index.labels, *o.seed);
  }
  return index;
}

// Keras's argument checks, in Keras's order (with Lockstep's wording).
void check_arguments(const ImageDatasetOptions& o) {
  const char* f = "image_dataset_from_directory";
  const std::string& mode = o.labels.mode();
  LOCKSTEP_CHECK(mode == "inferred" || mode == "list" || mode == "none", f,
                 ": labels must be \"inferred\", a list of integer labels (one per file) or "
                 "std::nullopt (no labels), got \"",
                 mode, "\"");
  LOCKSTEP_CHECK(mode == "inferred" || o.class_names.empty(), f,
                 ": class_names can only be given with labels \"inferred\"");
  LOCKSTEP_CHECK(
      !o.label_mode || *o.label_mode == "int" || *o.label_mode == "categorical" ||
          *o.label_mode == "binary",
      f, ": label_mode must be \"int\", \"categorical\", \"binary\" or std::nullopt, got \"",
      o.label_mode.value_or(""), "\"");
  LOCKSTEP_CHECK(o.color_mode == "rgb" || o.color_mode == "rgba" || o.color_mode == "grayscale", f,
                 ": color_mode must be \"rgb\", \"rgba\" or \"grayscale\", got \"", o.color_mode,
                 "\"");
  LOCKSTEP_CHECK(o.image_size[0] > 0 && o.image_size[1] > 0, f,
                 ": image_size must be two positive numbers, got (", o.image_size[0], ", ",
                 o.image_size[1], ")");
  LOCKSTEP_CHECK(o.interpolation == "bilinear" || o.interpolation == "nearest", f,
                 ": interpolation \"", o.interpolation,
                 "\" is not implemented; Lockstep has \"bilinear\" and \"nearest\"");
  LOCKSTEP_CHECK(!o.batch_size || *o.batch_size > 0, f, ": batch_size must be > 0, got ",
                 o.batch_size.value_or(0));
  const double split = o.validation_split;
  LOCKSTEP_CHECK(split == 0 || (split > 0 && split < 1), f,
                 ": validation_split must be between 0 and 1, got ", split);
  LOCKSTEP_CHECK((split != 0) == !o.subset.empty(), f,
                 ": subset and validation_split go together: set both or neither (got subset \"",
                 o.subset, "\", validation_split ", split, ")");
  LOCKSTEP_CHECK(
      o.subset.empty() || o.subset == "training" || o.subset == "validation" || o.subset == "both",
      f, ": subset must be \"training\", \"validation\" or \"both\", got \"", o.subset, "\"");
  LOCKSTEP_CHECK(!(split != 0 && o.shuffle && !o.seed), f,
                 ": a validation_split with shuffling needs a seed, so that the training and "
                 "the validation subsets do not overlap. Hint: pass .seed = 1337 (any number), "
                 "the same for both subsets");
  LOCKSTEP_CHECK(!o.seed || *o.seed <= 0xffffffffULL, f,
                 ": seed must be between 0 and 2^32 - 1 (NumPy's RandomState), got ", *o.seed);
  LOCKSTEP_CHECK(!(o.crop_to_aspect_ratio && o.pad_to_aspect_ratio), f,
                 ": only one of crop_to_aspect_ratio and pad_to_aspect_ratio can be true");
}

// dataset_utils.get_training_or_validation_split. Keras takes the last
// int(split * N) files for validation; when that is 0 its slices give
// training nothing and validation everything — here an error instead.
std::pair<std::size_t, std::size_t> split_range(std::size_t n, double split,
                                                const std::string& subset, std::ostream& out,
                                                const std::string& directory) {
  if (split == 0) return {0, n};
  const auto num_val = static_cast<std::size_t>(split * static_cast<double>(n));
  LOCKSTEP_CHECK(num_val > 0 || n == 0, "image_dataset_from_directory: validation_split ", split,
                 " of the ", n, " files in '", directory, "' leaves no file for validation (int(",
                 split, " * ", n, ") = 0). Hint: a larger validation_split, or more files");
  if (subset == "training") {
    out << "Using " << n - num_val << " files for training." << std::endl;
    return {0, n - num_val};
  }
  out << "Using " << num_val << " files for validation." << std::endl;
  return {n - num_val, n};
}

int channels_of(const std::string& color_mode) {
  return color_mode == "grayscale" ? 1 : color_mode == "rgba" ? 4 : 3;
}

// The dataset of files [begin, end) of the index (paths_and_labels_to_dataset,
// then batch and prefetch).
ImageDataset make_dataset(const Index& index, std::size_t begin, std::size_t end,
                          const ImageDatasetOptions& o, bool shuffle, const std::string& directory,
                          const char* subset_name) {
  LOCKSTEP_CHECK(end > begin, "image_dataset_from_directory: no ", subset_name,
                 "images found in folder '", directory, "'. Allowed formats: ", kAllowedFormats,
                 ". Hint: ",
                 index.file_paths.empty() ? "put the images in the folder's class subfolders"
                                          : "a smaller validation_split");
  std::vector<std::string> paths(index.file_paths.begin() + static_cast<std::ptrdiff_t>(begin),
                                 index.file_paths.begin() + static_cast<std::ptrdiff_t>(end));
  const auto n = static_cast<std::int64_t>(paths.size());
  std::vector<std::int64_t> positions(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) positions[static_cast<std::size_t>(i)] = i;
  std::vector<Tensor> components{Tensor::from_vector(positions)};
  const bool labelled = o.label_mode && o.labels.mode() != "none";
  if (labelled) {
    std::vector<std::int32_t> ints;
    for (std::size_t i = begin; i < end; ++i)
      ints.push_back(static_cast<std::int32_t>(index.labels[i]));
    Tensor labels = Tensor::from_vector(ints);
    if (*o.label_mode == "binary") {
      labels = reshape(cast(labels, DType::kFloat32), {n, 1});
    } else if (*o.label_mode == "categorical") {
      labels = one_hot(labels, static_cast<std::int64_t>(index.class_names.size()));
    }
    components.push_back(labels);
  }
  Dataset ds = Dataset::from_tensor_slices(components);
  if (shuffle) {
    const std::int64_t buffer = o.batch_size ? *o.batch_size * 8 : 1024;
    ds = ds.shuffle(buffer, {.seed = *o.seed});
  }
  const LoadImageOptions load{.image_size = o.image_size,
                              .channels = channels_of(o.color_mode),
                              .interpolation = o.interpolation,
                              .crop_to_aspect_ratio = o.crop_to_aspect_ratio,
                              .pad_to_aspect_ratio = o.pad_to_aspect_ratio};
  auto shared_paths = std::make_shared<const std::vector<std::string>>(std::move(paths));
  ds = ds.map(
      [shared_paths, load](const Element& e) {
        const auto i = static_cast<std::size_t>(e[0].item<std::int64_t>());
        Tensor image = load_image((*shared_paths)[i], load);
        if (e.size() == 1) return Element{image};
        return Element{image, e[1]};
      },
      {.num_parallel_calls = o.num_parallel_calls});
  if (o.batch_size) ds = ds.batch(*o.batch_size);
  ds = ds.prefetch(kAutotune);
  return ImageDataset(std::move(ds), labelled ? index.class_names : std::vector<std::string>{},
                      *shared_paths);
}

// What both entry points do before making datasets: the checks, the seed,
// the index, the binary check.
struct Prepared {
  ImageDatasetOptions options;
  Index index;
  std::ostream* out;  // the caller's stream, or null: the log sink
};

Prepared prepare(const std::string& directory, ImageDatasetOptions o) {
  check_arguments(o);
  if (o.labels.mode() == "none" || !o.label_mode) {  // Keras: either None makes both None
    o.labels = std::nullopt;
    o.label_mode = std::nullopt;
  }
  if (!o.seed) o.seed = std::random_device{}() % 1000000;  // np.random.randint(1e6)
  LogStream fallback(LogLevel::kOutput);
  Index index = index_directory(directory, o, o.out ? *o.out : fallback);
  LOCKSTEP_CHECK(
      o.label_mode != "binary" || index.class_names.size() == 2,
      "image_dataset_from_directory: label_mode \"binary\" needs exactly 2 classes, got ",
      index.class_names.size());
  std::ostream* out = o.out;
  return {std::move(o), std::move(index), out};
}

}  // namespace

Tensor load_image(const std::string& path, const LoadImageOptions& o) {
  LOCKSTEP_CHECK(
      !(o.crop_to_aspect_ratio && o.pad_to_aspect_ratio),
      "load_image: only one of crop_to_aspect_ratio and pad_to_aspect_ratio can be true");
  LOCKSTEP_CHECK(o.channels == 1 || o.channels == 3 || o.channels == 4,
                 "load_image: channels must be 1, 3 or 4, got ", o.channels);
  const Tensor img = read_image(path, o.channels);
  const std::int64_t height = img.dim(0), width = img.dim(1);
  const std::int64_t th = o.image_size[0], tw = o.image_size[1];
  const image::ResizeOptions method{.interpolation = o.interpolation};
  if (o.crop_to_aspect_ratio) {
    // smart_resize, in the float32 arithmetic of its TensorFlow graph.
    auto to_int = [](float v) { return static_cast<std::int64_t>(v); };
    const std::int64_t crop_h = std::max<std::int64_t>(
        std::min(height, to_int(static_cast<float>(width * th) / static_cast<float>(tw))), 1);
    const std::int64_t crop_w = std::max<std::int64_t>(
        std::min(width, to_int(static_cast<float>(height * tw) / static_cast<float>(th))), 1);
    const std::int64_t top = to_int(static_cast<float>(height - crop_h) / 2);
    const std::int64_t left = to_int(static_cast<float>(width - crop_w) / 2);
    return image::resize(slice(img, {top, left, 0}, {crop_h, crop_w, -1}), o.image_size, method);
  }
  if (o.pad_to_aspect_ratio) {
    // tf.image.resize_with_pad: resize to fit, then pad with zeros.
    const auto fh = static_cast<float>(height), fw = static_cast<float>(width);
    const auto fth = static_cast<float>(th), ftw = static_cast<float>(tw);
    const float ratio = std::max(fw / ftw, fh / fth);
    const float rh = fh / ratio, rw = fw / ratio;
    const auto new_h = static_cast<std::int64_t>(std::floor(rh));
    const auto new_w = static_cast<std::int64_t>(std::floor(rw));
    const std::int64_t top =
        std::max<std::int64_t>(0, static_cast<std::int64_t>(std::floor((fth - rh) / 2)));
    const std::int64_t left =
        std::max<std::int64_t>(0, static_cast<std::int64_t>(std::floor((ftw - rw) / 2)));
    const Tensor resized = image::resize(img, {new_h, new_w}, method);
    return pad(resized, {{top, th - new_h - top}, {left, tw - new_w - left}, {0, 0}});
  }
  return image::resize(img, o.image_size, method);
}

ImageDataset image_dataset_from_directory(const std::string& directory,
                                          const ImageDatasetOptions& options) {
  LOCKSTEP_CHECK(options.subset != "both",
                 "image_dataset_from_directory: subset \"both\" makes two datasets. Hint: call "
                 "image_dataset_from_directory_split, which returns (training, validation)");
  const Prepared p = prepare(directory, options);
  LogStream fallback(LogLevel::kOutput);
  const auto [begin, end] = split_range(p.index.file_paths.size(), p.options.validation_split,
                                        p.options.subset, p.out ? *p.out : fallback, directory);
  return make_dataset(p.index, begin, end, p.options, p.options.shuffle, directory, "");
}

std::pair<ImageDataset, ImageDataset> image_dataset_from_directory_split(
    const std::string& directory, const ImageDatasetOptions& options) {
  LOCKSTEP_CHECK(options.subset.empty() || options.subset == "both",
                 "image_dataset_from_directory_split: makes both subsets; got subset \"",
                 options.subset, "\". Hint: for one subset call image_dataset_from_directory");
  LOCKSTEP_CHECK(options.validation_split > 0,
                 "image_dataset_from_directory_split: needs a "
                 "validation_split in (0, 1), got ",
                 options.validation_split);
  ImageDatasetOptions both = options;
  both.subset = "both";
  const Prepared p = prepare(directory, both);
  const std::size_t n = p.index.file_paths.size();
  LogStream fallback(LogLevel::kOutput);
  std::ostream& out = p.out ? *p.out : fallback;
  const auto train = split_range(n, p.options.validation_split, "training", out, directory);
  const auto val = split_range(n, p.options.validation_split, "validation", out, directory);
  return {make_dataset(p.index, train.first, train.second, p.options, p.options.shuffle, directory,
                       "training "),
          make_dataset(p.index, val.first, val.second, p.options, false, directory, "validation ")};
}

}  // namespace lockstep::data
