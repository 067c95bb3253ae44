// `lockstep inspect FILE`: what a checkpoint or model file holds, read the
// way a restore reads it. By the file's suffix:
//   .safetensors  the tensors (name, dtype, shape, bytes, CRC32C) and
//                 metadata, every checksum verified; for a Lockstep
//                 checkpoint also its format version and training position;
//   .keras, .h5   the model Keras's file rebuilds: its layers (Keras's
//                 summary table), its weights with their shapes, and the
//                 compile config (optimizer, loss, metrics);
//   .weights.h5   every weight in the file by its Keras path, with shapes.
// A damaged file is an IOError naming the file and where: exit code 1. A
// .keras file with a layer Lockstep cannot build first lists its layers as
// its config.json has them, marking each class Lockstep lacks.
#include "inspect.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "lockstep/io/zip.h"
#include "lockstep/lockstep.h"

namespace lockstep::cli {
namespace {

using json = nlohmann::json;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void list_h5(const io::H5Group& g, const std::string& path) {
  for (const auto& [name, t] : g.datasets) {
    std::printf("  %-48s %-8s %s\n", (path + name).c_str(),
                std::string(dtype_name(t.dtype())).c_str(), t.shape().to_string().c_str());
  }
  for (const auto& [name, child] : g.groups) {
    if (const std::string* layer = child.string_attribute("name"); layer && !child.datasets.empty())
      std::printf("  %s (%s)\n", (path + name).c_str(), layer->c_str());
    list_h5(child, path + name + "/");
  }
}

// The layers of a Keras model config (config.json's), one line each,
// nested models indented, each marked when Lockstep has no such class.
int list_config_layers(const json& model, int depth) {
  int unknown = 0;
  const json layers = model.value("config", json::object()).value("layers", json::array());
  for (const json& entry : layers) {
    const std::string cls = entry.value("class_name", std::string("?"));
    const std::string name = entry.value("config", json::object()).value("name", std::string());
    const bool network = cls == "Functional" || cls == "Sequential" || cls == "Model";
    // A Lambda is Python code: buildable only as the C++ layer registered
    // under its name.
    const bool lambda = cls == "Lambda";
    const bool known =
        network || (lambda ? lambda_factory(name) != nullptr : is_known_layer_class(cls));
    unknown += known ? 0 : 1;
    std::printf("  %*s%-32s %s%s\n", 2 * depth, "", name.c_str(), cls.c_str(),
                known    ? ""
                : lambda ? "   <- Python code: supply it with register_lambda"
                         : "   <- Lockstep has no such layer class");
    if (network) unknown += list_config_layers(entry, depth + 1);
  }
  return unknown;
}

// A .keras file Lockstep cannot rebuild: what its config.json says, with
// each layer Lockstep cannot build marked, before the loader's error.
void show_unbuilt(const std::string& path) {
  std::string text;
  try {
    for (io::ZipMember& m : io::read_zip(path)) {
      if (m.name == "config.json") text = std::move(m.data);
    }
  } catch (const std::exception&) {
    return;  // the loader's error says what is wrong with the archive
  }
  // Parsed again only when shallow: a hostile file nests JSON deep enough to
  // exhaust a recursive parser's stack (the loader checks before it parses).
  int depth = 0, deepest = 0;
  for (char c : text) {
    if (c == '[' || c == '{') deepest = std::max(deepest, ++depth);
    if (c == ']' || c == '}') --depth;
  }
  if (deepest > 256) return;
  const json config = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) return;
  std::printf("%s: a Keras model file (%s) that Lockstep cannot rebuild; its layers:\n",
              path.c_str(), config.value("class_name", std::string("?")).c_str());
  const int unknown = list_config_layers(config, 0);
  std::printf("%d layer class(es) Lockstep does not have; the loader says:\n", unknown);
  std::fflush(stdout);
}

int inspect_keras_model(const std::string& path) {
  Model model;
  try {
    model = load_model(path);
  } catch (const ValueError& e) {
    const std::string what = e.what();
    if (ends_with(path, ".keras") && (what.find("unknown layer class") != std::string::npos ||
                                      what.find("a Lambda layer holds") != std::string::npos))
      show_unbuilt(path);
    throw;
  }
  std::printf("%s: a Keras model file\n", path.c_str());
  model.summary(std::cout);
  std::printf("weights:\n");
  for (const Variable& v : model.weights()) {
    std::printf("  %-48s %-8s %s\n", v.name().c_str(), std::string(dtype_name(v.dtype())).c_str(),
                v.shape().to_string().c_str());
  }
  const std::string compile = model.get_compile_config();
  if (compile.empty()) {
    std::printf("compile config: none (not compiled)\n");
  } else {
    std::printf("compile config: %s\n", compile.c_str());
    std::printf("optimizer steps: %lld\n", static_cast<long long>(model.optimizer().iterations()));
  }
  return 0;
}

int inspect_safetensors(const std::string& path) {
  const io::TensorFile file = io::read_safetensors(path);
  std::printf("%s\n", path.c_str());
  std::printf("header checksum: %s\n",
              file.header_checked ? "verified" : "absent (not written by Lockstep)");
  const auto format = file.metadata.find("format");
  if (format != file.metadata.end() && format->second == "lockstep.checkpoint") {
    const CheckpointInfo info = Checkpoint::read(path);
    std::printf(
        "checkpoint format version %d, %lld optimizer steps, saved under %s (%d replicas)\n",
        info.format_version, static_cast<long long>(info.iterations), info.strategy.c_str(),
        info.replicas);
    if (info.position)
      std::printf("training position: epoch %d, batch %lld\n", info.position->epoch + 1,
                  static_cast<long long>(info.position->step));
  }
  std::printf("metadata:\n");
  for (const auto& [key, value] : file.metadata) {
    // Long values (model configs) are cut: inspect is for reading.
    const std::string shown = value.size() > 100 ? value.substr(0, 97) + "..." : value;
    std::printf("  %s: %s\n", key.c_str(), shown.c_str());
  }
  std::printf("tensors (%zu):\n", file.tensors.size());
  std::uint64_t total = 0;
  for (const auto& [name, t] : file.tensors) {
    std::printf("  %-48s %-8s %-16s %10llu bytes  crc32c %08x\n", name.c_str(),
                std::string(dtype_name(t.dtype())).c_str(), t.shape().to_string().c_str(),
                static_cast<unsigned long long>(t.nbytes()), crc32c(t.raw_data(), t.nbytes()));
    total += t.nbytes();
  }
  std::printf("%llu bytes of tensor data; every checksum verified\n",
              static_cast<unsigned long long>(total));
  return 0;
}

}  // namespace

CLI::App* add_inspect_command(CLI::App& app, InspectArgs& a) {
  CLI::App* inspect = app.add_subcommand(
      "inspect", "list what a checkpoint or model file holds (.safetensors, .keras, .h5)");
  inspect
      ->add_option("file", a.file,
                   "a .safetensors checkpoint, a .keras or .h5 model, or a "
                   ".weights.h5 file")
      ->required();
  return inspect;
}

int run_inspect(const InspectArgs& a) {
  if (ends_with(a.file, ".weights.h5")) {
    const io::H5Group tree = io::read_h5(a.file);
    std::printf("%s: Keras weights (HDF5)\n", a.file.c_str());
    list_h5(tree, "");
    return 0;
  }
  if (ends_with(a.file, ".keras") || ends_with(a.file, ".h5")) return inspect_keras_model(a.file);
  return inspect_safetensors(a.file);
}

}  // namespace lockstep::cli
