// `lockstep inspect FILE`: what a checkpoint or model file holds, read the
// way a restore reads it. By the file's suffix:
//   .safetensors  the tensors (name, dtype, shape, bytes, CRC32C) and
//                 metadata, every checksum verified; for a Lockstep
//                 checkpoint also its format version and training position;
//   .keras, .h5   the model Keras's file rebuilds: its layers (Keras's
//                 summary table), its weights with their shapes, and the
//                 compile config (optimizer, loss, metrics);
//   .weights.h5   every weight in the file by its Keras path, with shapes.
// A damaged file is an IOError naming the file and where: exit code 1.
#include "inspect.h"

#include <cstdio>
#include <iostream>

#include "lockstep/lockstep.h"

namespace lockstep::cli {
namespace {

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

int inspect_keras_model(const std::string& path) {
  Model model = load_model(path);
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
