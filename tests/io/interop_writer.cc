// Writes a small Lockstep checkpoint (a trained Dense model with Adam's
// slots) and, beside it, every tensor as a .npy file named by its position;
// and a TensorBoard log of that training with the expected scalars listed in
// scalars.txt. The Python interop test (python_interop.py) reads them with
// safetensors and TensorBoard's own event reader and compares.
//
// usage: interop_writer OUT_DIR
#include <cstdio>
#include <filesystem>

#include "lockstep/lockstep.h"

int main(int argc, char** argv) {
  namespace ls = lockstep;
  if (argc != 2) {
    std::fprintf(stderr, "usage: interop_writer OUT_DIR\n");
    return 2;
  }
  const std::filesystem::path out = argv[1];
  std::filesystem::create_directories(out);
  ls::set_random_seed(3);
  auto in = ls::Input({5});
  ls::Model m(in, ls::layers::Dense(3)(ls::layers::Dense(4, {.activation = "relu"})(in)));
  m.compile({.optimizer = ls::optimizers::Adam(), .loss = ls::losses::MeanSquaredError()});
  const ls::History history =
      m.fit(ls::random::uniform({6, 5}, {.seed = 1}), ls::random::uniform({6, 3}, {.seed = 2}),
            {.batch_size = 3,
             .verbose = 0,
             .callbacks = {std::make_shared<ls::TensorBoard>((out / "logs").string())}});
  std::FILE* scalars = std::fopen((out / "scalars.txt").c_str(), "w");
  std::fprintf(scalars, "epoch_loss 0 %.9g\n", static_cast<float>(history["loss"][0]));
  std::fclose(scalars);
  const std::string path = (out / "checkpoint.safetensors").string();
  ls::Checkpoint(m).save(path);
  const ls::io::TensorFile file = ls::io::read_safetensors(path);
  std::FILE* names = std::fopen((out / "names.txt").c_str(), "w");
  for (std::size_t i = 0; i < file.tensors.size(); ++i) {
    ls::data::write_npy((out / (std::to_string(i) + ".npy")).string(), file.tensors[i].second);
    std::fprintf(names, "%s\n", file.tensors[i].first.c_str());
  }
  std::fclose(names);
  std::printf("wrote %zu tensors\n", file.tensors.size());
  return 0;
}
