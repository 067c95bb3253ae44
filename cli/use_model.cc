// `lockstep evaluate` and `lockstep predict` (use_model.h): load the model
// under the strategy, read the data as its training run did, check the two
// fit, then evaluate with Keras's progress lines or write the predictions.
#include "use_model.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "lockstep/core/file.h"
#include "train.h"

namespace lockstep::cli {
namespace {

namespace ld = lockstep::data;

void add_common_options(CLI::App& c, UseModelArgs& a) {
  c.add_option("--model", a.model, "the trained model: a Keras file (.keras, .h5)")->required();
  add_data_options(c, a.data, /*training=*/false);
  c.get_option("--data")->required();
  c.add_option("--batch-size", a.batch_size, "global batch size")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 24))
      ->capture_default_str();
  c.add_option("--steps", a.steps, "batches to run (0: all)")->check(CLI::NonNegativeNumber);
  c.add_option("--verbose", a.verbose, "0 silent, 1 progress bar (line on a pipe), 2 line")
      ->check(CLI::Range(0, 2))
      ->capture_default_str();
  c.add_option("--strategy", a.strategy, "mirrored, one-device, default or multi-worker")
      ->check(CLI::IsMember({"mirrored", "one-device", "default", "multi-worker"}))
      ->capture_default_str();
  c.add_option("--devices", a.devices,
               "the replicas' devices: a count of CPU devices, core sets, \"gpu\" or device names");
}

struct Loaded {
  distribute::Strategy strategy;
  Model model;
  DataSpec spec;
  Examples examples;
};

// The model under the strategy, its data spec (beside it, or read off the
// data as train would), and the examples; checked to fit.
Loaded load(const UseModelArgs& a, bool with_labels) {
  TrainArgs t;
  t.strategy = a.strategy;
  t.devices = a.devices;
  choose_devices(t);
  Loaded l{.strategy = make_strategy(t), .model = {}, .spec = {}, .examples = {}};
  const std::string suffix = std::filesystem::path(a.model).extension().string();
  LOCKSTEP_CHECK(suffix == ".keras" || suffix == ".h5", "--model ", a.model,
                 ": expected a Keras file (.keras or .h5) holding the architecture and weights");
  {
    auto scope = l.strategy.scope();
    l.model = load_model(a.model);
  }
  if (auto spec = spec_beside(a.model)) {
    l.spec = *spec;
  } else {
    // A model trained elsewhere (Keras): the data read as train reads it,
    // all of it.
    std::printf("No %s.data.json beside the model: reading --data as lockstep train would.\n",
                a.model.c_str());
    DataArgs d = a.data;
    d.validation_split = 0;
    std::optional<std::vector<std::int64_t>> input;
    DType input_dtype = DType::kFloat32;
    if (l.model.inputs().size() == 1) {
      input = l.model.inputs()[0].sample_shape().to_vector();
      input_dtype = l.model.inputs()[0].dtype();
    }
    const ModelSides sides = ModelSides::of(l.model);
    l.spec = read_training_data(d, input, input_dtype, sides.several() ? &sides : nullptr).spec;
  }
  check_model_fits_data(l.model, l.spec, a.model);
  l.examples = read_examples(a.data.source, l.spec, with_labels);
  LOCKSTEP_CHECK(l.examples.count > 0, a.data.source, ": no examples");
  if (with_labels && !l.model.compiled()) {
    auto scope = l.strategy.scope();
    l.model.compile(compile_options_for(l.spec, l.model, "auto", 1e-3));
  }
  return l;
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

}  // namespace

CLI::App* add_evaluate_command(CLI::App& app, UseModelArgs& a) {
  CLI::App* c = app.add_subcommand(
      "evaluate", "evaluate a trained model on examples with labels (Keras's model.evaluate)");
  add_common_options(*c, a);
  return c;
}

CLI::App* add_predict_command(CLI::App& app, UseModelArgs& a) {
  CLI::App* c = app.add_subcommand(
      "predict", "write a trained model's predictions for examples (Keras's model.predict)");
  add_common_options(*c, a);
  c->add_option("--output", a.output,
                "preds.csv (per example: the class, its probability, every class's) or "
                "preds.npy (the model's outputs)")
      ->required();
  return c;
}

int run_evaluate(const UseModelArgs& a) {
  Loaded l = load(a, /*with_labels=*/true);
  const Logs logs = l.model.evaluate(l.examples.batches(a.batch_size, std::nullopt),
                                     {.steps = a.steps, .verbose = a.verbose});
  if (!l.strategy.is_chief()) return 0;
  std::string line;
  for (const auto& [name, value] : logs) {
    char text[64];
    std::snprintf(text, sizeof text, "%s: %.4f", name.c_str(), value);
    line += (line.empty() ? "" : " - ") + std::string(text);
  }
  std::printf("%s\n", line.c_str());
  return 0;
}

int run_predict(const UseModelArgs& a) {
  const std::string suffix = std::filesystem::path(a.output).extension().string();
  LOCKSTEP_CHECK(suffix == ".csv" || suffix == ".npy" || suffix == ".npz", "--output ", a.output,
                 ": expected a .csv, .npy or .npz file");
  Loaded l = load(a, /*with_labels=*/false);
  const std::size_t outputs = l.model.outputs().size();
  if (suffix == ".npz" || outputs > 1) {
    // Every output, each an array named after its layer (a .npz; a model
    // with several outputs writes nothing else).
    LOCKSTEP_CHECK(suffix == ".npz", "--output ", a.output, ": the model has ", outputs,
                   " outputs; give a .npz, which holds one array per output");
    const std::vector<Tensor> out = l.model.predict_outputs(
        l.examples.batches(a.batch_size, std::nullopt), {.steps = a.steps, .verbose = a.verbose});
    if (!l.strategy.is_chief()) return 0;
    write_npz(a.output, ModelSides::of(l.model).output_names, out);
    std::printf("wrote %lld predictions of %zu output(s) to %s\n",
                static_cast<long long>(out.at(0).dim(0)), out.size(), a.output.c_str());
    return 0;
  }
  const Tensor out = l.model.predict(l.examples.batches(a.batch_size, std::nullopt),
                                     {.steps = a.steps, .verbose = a.verbose});
  if (!l.strategy.is_chief()) return 0;
  if (suffix == ".npy") {
    ld::write_npy(a.output, out);
  } else {
    const std::int64_t n = out.dim(0), k = out.numel() / std::max<std::int64_t>(n, 1);
    const std::vector<float> values = out.to_vector<float>();
    std::ostringstream csv;
    const std::vector<std::string>& files = l.examples.paths;  // images: which file
    csv << (files.empty() ? "" : "file,");
    if (l.spec.classification()) {
      csv << "class,probability";
      for (const std::string& c : l.spec.class_names) csv << "," << csv_field(c);
      csv << "\n";
      // Probabilities: the outputs, or their softmax when the model ends
      // in logits.
      const std::vector<float> p =
          ends_in_softmax(l.model) ? values : softmax(out).to_vector<float>();
      for (std::int64_t r = 0; r < n; ++r) {
        const float* row = p.data() + r * k;
        std::int64_t best = 0;
        for (std::int64_t j = 1; j < k; ++j) best = row[j] > row[best] ? j : best;
        if (!files.empty()) csv << csv_field(files[static_cast<std::size_t>(r)]) << ",";
        csv << csv_field(l.spec.class_names.at(static_cast<std::size_t>(best))) << "," << row[best];
        for (std::int64_t j = 0; j < k; ++j) csv << "," << row[j];
        csv << "\n";
      }
    } else {
      for (std::int64_t j = 0; j < k; ++j)
        csv << (j ? "," : "") << "prediction" << (k > 1 ? std::to_string(j) : "");
      csv << "\n";
      for (std::int64_t r = 0; r < n; ++r) {
        if (!files.empty()) csv << csv_field(files[static_cast<std::size_t>(r)]) << ",";
        for (std::int64_t j = 0; j < k; ++j) csv << (j ? "," : "") << values[r * k + j];
        csv << "\n";
      }
    }
    AtomicFileWriter file(a.output);
    const std::string text = csv.str();
    file.write(text.data(), text.size());
    file.commit();
  }
  std::printf("wrote %lld predictions to %s\n", static_cast<long long>(out.dim(0)),
              a.output.c_str());
  return 0;
}

}  // namespace lockstep::cli
