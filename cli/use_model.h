// `lockstep evaluate` and `lockstep predict`: a trained model (a Keras file
// that `lockstep train --save` or Keras wrote) on the user's data, read as
// the run that trained it read its own (the <model>.data.json beside it).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "data_source.h"

namespace lockstep::cli {

struct UseModelArgs {
  std::string model;  // .keras or .h5
  DataArgs data;
  std::string output;  // predict: preds.csv or preds.npy
  std::int64_t batch_size = 64;
  std::int64_t steps = 0;  // batches; 0: all
  int verbose = 1;
  std::string strategy = "mirrored";  // mirrored | one-device | default | multi-worker
  std::string devices;
};

CLI::App* add_evaluate_command(CLI::App& app, UseModelArgs& args);
CLI::App* add_predict_command(CLI::App& app, UseModelArgs& args);
int run_evaluate(const UseModelArgs& args);
int run_predict(const UseModelArgs& args);

}  // namespace lockstep::cli
