// `--data SOURCE`: the user's own examples for `lockstep train`, `evaluate`
// and `predict` — a folder of class subfolders of images, a CSV file with a
// header, NumPy files (`x.npy,y.npy` or one `.npz`) — read, checked and
// encoded as a model takes them; and the encoding itself (DataSpec), which
// a trained model keeps beside it as `<model file>.data.json` so that
// evaluate and predict read new data the same way. (The IDX folder of
// Fashion-MNIST stays train.cc's main job.)
#pragma once

#include <CLI/CLI.hpp>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/lockstep.h"

namespace lockstep::cli {

struct DataArgs {
  std::string source;              // --data
  std::string validation_source;   // --validation-data
  double validation_split = -1;    // --validation-split; < 0: 0.2 (0 with --validation-data)
  std::string label;               // --label: a CSV's target column
  std::string features;            // --features: a CSV's input columns, comma-separated
  std::string image_size;          // --image-size HxW (default: the model's input, else 96x96)
  std::string color_mode = "rgb";  // --color-mode rgb | grayscale
  std::string loss = "auto";       // --loss: auto | sparse_categorical_crossentropy | mse | mae
  std::uint64_t seed = 1337;
};

// --data and the flags that say how to read it; `training`: train's
// (validation and the task), else evaluate's and predict's.
void add_data_options(CLI::App& command, DataArgs& args, bool training);

// How a source's examples become a model's inputs and targets.
struct DataSpec {
  std::string kind;                        // "csv", "npy", "images"
  std::vector<std::int64_t> sample_shape;  // one example's input
  // Classification: the classes (label i is class_names[i]). Regression:
  // none, and `targets` values per example.
  std::vector<std::string> class_names;
  std::int64_t targets = 0;
  // CSV: the label column and the input columns in order; a text column is
  // one-hot over its vocabulary (the training split's values, sorted).
  std::string label;
  struct Feature {
    std::string name;
    std::vector<std::string> vocabulary{};  // empty: numeric
  };
  std::vector<Feature> features;
  // CSV and NPY feature vectors: the training split's mean and variance per
  // input value (the model's Normalization layer holds them too).
  std::vector<double> mean, variance;
  // Images: their size and colour mode.
  std::array<std::int64_t, 2> image_size{0, 0};
  std::string color_mode;
  // NPY: "int32" when the model takes integer inputs (an Embedding's token
  // ids), which x then keeps; else "float32".
  std::string input_dtype = "float32";
  // A model with several inputs or outputs: a .npz whose arrays are named
  // after them (Keras's fit with dicts), each with one example's shape and,
  // for an output, its classes (empty: a regression on `targets` values).
  // Empty: one x and one y, as above.
  struct Array {
    std::string name;
    std::vector<std::int64_t> shape{};
    std::string dtype = "float32";
    std::vector<std::string> class_names{};
    std::int64_t targets = 0;
  };
  std::vector<Array> inputs{}, outputs{};

  bool classification() const { return targets == 0; }
  bool named() const { return !inputs.empty(); }
  std::string to_json() const;
  static DataSpec from_json(const std::string& text, const std::string& where);
};

// Examples in memory (x float32 [n, ...]; y int32 class ids [n] or float32
// [n, targets], undefined without labels), or an image folder's pipeline of
// single (image, label) elements.
struct Examples {
  Tensor x, y;
  // Or, from a .npz of named arrays: the model's inputs then its outputs
  // (outputs absent without labels), in the spec's order.
  std::vector<std::string> names;
  std::vector<Tensor> arrays;
  data::Dataset files;
  std::vector<std::string> paths;  // an image folder's files, in the dataset's order
  std::int64_t count = 0;
  // Batches of (x, y), or of x alone without labels; shuffled each epoch
  // with `shuffle_seed`.
  data::Dataset batches(std::int64_t batch_size, std::optional<std::uint64_t> shuffle_seed) const;
};

struct TrainingData {
  DataSpec spec;
  Examples train, validation;  // validation.count 0: none
  std::string fingerprint;     // the source's size and checksum (an exact resume's check)
};

// A model's inputs and outputs as --data names them: the arrays of a .npz
// when there are several of either.
struct ModelSides {
  std::vector<std::string> input_names, output_names;
  std::vector<std::vector<std::int64_t>> input_shapes;
  std::vector<DType> input_dtypes;
  static ModelSides of(const Model& model);
  bool several() const { return input_names.size() > 1 || output_names.size() > 1; }
};

// --data and its validation, split and encoded; `model_input`: a model
// file's input shape, which images are resized to when --image-size is not
// given, and which says whether a NumPy x [n, a, b] is sequences or images
// (given a channel); `model_input_dtype`: int32 keeps integer x as ids. Prints what it found, as
// Keras does ("Found 2000 files belonging to 2 classes.", the classes of a label column).
// `sides`: a model with several inputs or outputs, whose named arrays a
// .npz then holds.
TrainingData read_training_data(const DataArgs& args,
                                const std::optional<std::vector<std::int64_t>>& model_input,
                                DType model_input_dtype = DType::kFloat32,
                                const ModelSides* sides = nullptr);

// The training rows of `all` (all but the validation split's last rows,
// as read_training_data splits them).
Examples training_rows(const DataArgs& args, const Examples& all);

// `source` encoded as `spec` says (evaluate, predict); `with_labels`: the
// targets too (a CSV's label column must then be there).
Examples read_examples(const std::string& source, const DataSpec& spec, bool with_labels);

// The spec saved beside `model_path` (<model_path>.data.json), if any.
std::optional<DataSpec> spec_beside(const std::string& model_path);
void save_spec_beside(const std::string& model_path, const DataSpec& spec);

// The seed report's fine-tuning, from the command line.
struct FineTuning {
  // Keras weights for the model (.weights.h5, .keras, .h5); for
  // --model mobilenet_v2, the base's (include_top=False): the model is then
  // the report's, base -> pooling -> Dense(512, relu) -> Dropout(0.5) -> head.
  std::string weights;
  double alpha = 0.35;         // mobilenet_v2's width
  bool freeze_base = false;    // the base (the model's nested model) does not train
  std::string fine_tune_from;  // the base trains from this layer on, frozen before it
  // Epoch by epoch: constant, rampup (the report's), cosine, exponential.
  std::string schedule = "constant";
  bool changes_trainable() const { return freeze_base || !fine_tune_from.empty(); }
};

// A model for the data: `which` is mlp, cnn or mobilenet_v2 (built for its
// shape and classes, images rescaled inside the model, feature vectors
// normalised by a Normalization layer), or a model file, checked against the
// data's shape and classes before any step (an error names both).
Model model_for_data(const std::string& which, const DataSpec& spec, const FineTuning& tuning);
// --weights into a model not built with them, then --freeze-base and
// --fine-tune-from on its base (its first nested model; an error names the
// model when there is none, or the layer when the base has no such layer).
void load_weights_and_freeze(Model& model, const std::string& model_name, const FineTuning& tuning,
                             bool weights_loaded);
// The learning rate of `epoch` under tuning.schedule, for `epochs` epochs
// from `learning_rate`.
double scheduled_learning_rate(const FineTuning& tuning, double learning_rate, int epoch,
                               int epochs);
void check_model_fits_data(const Model& model, const DataSpec& spec, const std::string& model_name);

// Whether the model's last layer is a softmax (its outputs probabilities).
bool ends_in_softmax(const Model& model);
bool ends_in_softmax(const KerasTensor& output);

// `arrays` written as numpy.savez does (a zip of stored .npy members, one
// per name), atomically: predict's outputs of a model with several.
void write_npz(const std::string& path, const std::vector<std::string>& names,
               const std::vector<Tensor>& arrays);

// The loss and metrics the data calls for: classes → sparse categorical
// crossentropy (from logits unless the model ends in a softmax) and
// accuracy; regression → mean squared error (or --loss mae) and MAE.
CompileOptions compile_options_for(const DataSpec& spec, const Model& model,
                                   const std::string& loss, double learning_rate);

}  // namespace lockstep::cli
