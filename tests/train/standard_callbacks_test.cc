// Keras's built-in callbacks against hand-worked sequences of logs.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lockstep/lockstep.h"
#include "support/synthetic.h"
#include "support/weights.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

Model small_model() {
  set_random_seed(2);
  auto in = Input({8});
  Model m(in, layers::Dense(2)(in));
  m.compile({.optimizer = optimizers::SGD({.learning_rate = 0.1}),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy"}});
  return m;
}

// Feeds a callback the epoch-end logs of a fit that never happened.
void feed(Callback& cb, Model& m, const std::vector<Logs>& epochs) {
  cb.set_model(&m);
  cb.on_train_begin({});
  for (std::size_t e = 0; e < epochs.size() && !m.stop_training_requested(); ++e) {
    cb.on_epoch_begin(static_cast<int>(e), {});
    cb.on_epoch_end(static_cast<int>(e), epochs[e]);
  }
  cb.on_train_end({});
}

TEST(EarlyStopping, StopsAfterPatienceEpochsWithoutImprovementAndRestoresTheBest) {
  Model m = small_model();
  EarlyStopping stop(
      {.monitor = "val_loss", .min_delta = 0.01, .patience = 2, .restore_best_weights = true});
  stop.set_model(&m);
  stop.on_train_begin({});
  const std::vector<double> losses{1.0, 0.8, 0.795, 0.79, 0.5};
  std::vector<std::vector<std::vector<float>>> at_epoch;
  int e = 0;
  for (; e < 5 && !m.stop_training_requested(); ++e) {
    // Different weights at each epoch end.
    for (const Variable& v : m.impl()->weights()) {
      Variable w = v;
      w.assign(Tensor::full(v.shape(), static_cast<float>(e)));
    }
    at_epoch.push_back(testing_support::weights(m));
    stop.on_epoch_end(e, {{"val_loss", losses[static_cast<std::size_t>(e)]}});
  }
  stop.on_train_end({});
  // 0.795 and 0.79 do not beat 0.8 by 0.01: stop at epoch 3 (0-based).
  EXPECT_EQ(e, 4);
  EXPECT_EQ(stop.stopped_epoch(), 3);
  EXPECT_EQ(stop.best_epoch(), 1);
  testing_support::expect_bitwise(at_epoch[1], testing_support::weights(m), "best weights");
}

TEST(EarlyStopping, AccuracyIsMaximisedAndStartFromEpochDelaysCounting) {
  Model m = small_model();
  EarlyStopping stop({.monitor = "val_accuracy", .patience = 1, .start_from_epoch = 2});
  feed(stop, m,
       {{{"val_accuracy", 0.9}},
        {{"val_accuracy", 0.1}},
        {{"val_accuracy", 0.5}},
        {{"val_accuracy", 0.6}},
        {{"val_accuracy", 0.55}},
        {{"val_accuracy", 0.7}}});
  EXPECT_EQ(stop.stopped_epoch(), 4);  // epochs 0-1 ignored; 0.55 < 0.6 at epoch 4
}

TEST(ReduceLROnPlateau, MultipliesTheRateAfterPatienceThenCoolsDown) {
  Model m = small_model();
  ReduceLROnPlateau plateau(
      {.monitor = "loss", .factor = 0.5, .patience = 1, .cooldown = 2, .min_lr = 0.02});
  std::vector<double> rates;
  plateau.set_model(&m);
  plateau.on_train_begin({});
  for (double loss : {1.0, 1.0, 1.0, 1.0, 1.0, 1.0}) {
    plateau.on_epoch_end(0, {{"loss", loss}});
    rates.push_back(m.optimizer().learning_rate());
  }
  // patience 1: reduce at the 2nd epoch. As in Keras, the cooldown counter
  // is counted down before the comparison, so cooldown 2 skips one epoch;
  // then reduce again; the floor is min_lr.
  ASSERT_EQ(rates.size(), 6u);
  EXPECT_DOUBLE_EQ(rates[0], 0.1);
  EXPECT_DOUBLE_EQ(rates[1], 0.05);
  EXPECT_DOUBLE_EQ(rates[2], 0.05);
  EXPECT_DOUBLE_EQ(rates[3], 0.025);
  EXPECT_DOUBLE_EQ(rates[4], 0.025);
  EXPECT_DOUBLE_EQ(rates[5], 0.02);
}

TEST(LearningRateScheduler, SetsTheRateEveryEpochDuringFit) {
  Model m = small_model();
  auto [x, y] = testing_support::blobs(32, 1);
  std::vector<double> seen;
  auto record = std::make_shared<LambdaCallback>(LambdaCallback::Functions{
      .on_epoch_end = [&](int, const Logs&) { seen.push_back(m.optimizer().learning_rate()); }});
  m.fit(x, y,
        {.batch_size = 16,
         .epochs = 3,
         .verbose = 0,
         .callbacks = {std::make_shared<LearningRateScheduler>(
                           [](int epoch, double lr) { return epoch == 0 ? lr : lr / 10; }),
                       record}});
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_DOUBLE_EQ(seen[0], 0.1);
  EXPECT_NEAR(seen[1], 0.01, 1e-12);
  EXPECT_NEAR(seen[2], 0.001, 1e-12);
}

TEST(CSVLogger, WritesKerasRowsWithSortedKeysAndAppends) {
  const fs::path file = fs::temp_directory_path() / ("lockstep_csv_" + std::to_string(::getpid()));
  {
    Model m = small_model();
    CSVLogger logger(file.string());
    feed(logger, m, {{{"loss", 0.5}, {"accuracy", 0.25}}, {{"loss", 0.125}, {"accuracy", 1.0}}});
    CSVLogger again(file.string(), ';', /*append=*/true);
    feed(again, m, {{{"loss", 0.1}, {"accuracy", 0.75}}});
  }
  std::ifstream in(file, std::ios::binary);
  const std::string text{std::istreambuf_iterator<char>(in), {}};
  fs::remove(file);
  EXPECT_EQ(text, "epoch,accuracy,loss\r\n0,0.25,0.5\r\n1,1.0,0.125\r\n0;0.75;0.1\r\n");
}

// Python's str(float), as Keras's csv rows have them (the expected texts
// are Python's repr of the same doubles): scientific below 1e-4 and from
// 1e16 on, positional between — 0.0001 is not 1e-04.
TEST(CSVLogger, WritesFloatsAsPythonsStr) {
  const fs::path file =
      fs::temp_directory_path() / ("lockstep_csv_floats_" + std::to_string(::getpid()));
  {
    Model m = small_model();
    CSVLogger logger(file.string());
    feed(logger, m,
         {{{"a", 1e-05}, {"b", 2.8000000000000003e-05}, {"c", 0.0001}, {"d", -0.00012}},
          {{"a", 3.0}, {"b", 1e16}, {"c", 1.5e16}, {"d", 1e15}}});
  }
  std::ifstream in(file, std::ios::binary);
  const std::string text{std::istreambuf_iterator<char>(in), {}};
  fs::remove(file);
  EXPECT_EQ(text,
            "epoch,a,b,c,d\r\n0,1e-05,2.8000000000000003e-05,0.0001,-0.00012\r\n"
            "1,3.0,1e+16,1.5e+16,1000000000000000.0\r\n");
}

// Keras's line, the rate as Python prints it (Keras 3.15 printed "Epoch 6:
// LearningRateScheduler setting learning rate to 0.0001." for the ramp-up
// of examples/fine_tune_mobilenet.cc).
TEST(LearningRateScheduler, VerbosePrintsKerasLineWithPythonsFloat) {
  Model m = small_model();
  auto [x, y] = testing_support::blobs(16, 1);
  const std::vector<double> rates{1e-05, 2.8000000000000003e-05, 0.0001};
  testing::internal::CaptureStdout();
  m.fit(x, y,
        {.batch_size = 16,
         .epochs = 3,
         .verbose = 0,
         .callbacks = {std::make_shared<LearningRateScheduler>(
             [&](int epoch, double) { return rates.at(static_cast<std::size_t>(epoch)); },
             /*verbose=*/1)}});
  EXPECT_EQ(testing::internal::GetCapturedStdout(),
            "\nEpoch 1: LearningRateScheduler setting learning rate to 1e-05.\n"
            "\nEpoch 2: LearningRateScheduler setting learning rate to 2.8000000000000003e-05.\n"
            "\nEpoch 3: LearningRateScheduler setting learning rate to 0.0001.\n");
}

TEST(TerminateOnNaN, StopsFitAtTheFirstNonFiniteLoss) {
  Model m = small_model();
  auto [x, y] = testing_support::blobs(64, 1);
  float* p = x.data<float>();
  p[8 * 20] = std::numeric_limits<float>::infinity();  // example 20: batch 2 of 8
  int batches = 0;
  auto count = std::make_shared<LambdaCallback>(LambdaCallback::Functions{
      .on_train_batch_end = [&](std::int64_t, const Logs&) { ++batches; }});
  testing::internal::CaptureStdout();
  m.fit(x, y,
        {.batch_size = 8,
         .epochs = 2,
         .verbose = 0,
         .callbacks = {std::make_shared<TerminateOnNaN>(), count},
         .shuffle = false});
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(batches, 3);
  EXPECT_NE(out.find("Batch 2: Invalid loss, terminating training"), std::string::npos) << out;
}

TEST(ModelCheckpoint, FillsThePathTemplateAndSavesOnlyImprovements) {
  EXPECT_EQ(ModelCheckpoint::format_path("m-{epoch:02d}-{val_loss:.2f}.safetensors", 4, -1,
                                         {{"val_loss", 0.34567}}),
            "m-05-0.35.safetensors");
  EXPECT_EQ(ModelCheckpoint::format_path("b{batch}-{loss}", 0, 9, {{"loss", 0.5}}), "b10-0.5");
  EXPECT_THROW(ModelCheckpoint::format_path("{nope}", 0, -1, {{"loss", 1.0}}), ValueError);

  const fs::path dir = fs::temp_directory_path() / ("lockstep_mc_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  Model m = small_model();
  ModelCheckpoint best({.filepath = (dir / "e{epoch}.safetensors").string(),
                        .monitor = "val_loss",
                        .save_best_only = true});
  feed(best, m, {{{"val_loss", 0.5}}, {{"val_loss", 0.6}}, {{"val_loss", 0.4}}});
  EXPECT_TRUE(fs::exists(dir / "e1.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "e2.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "e3.safetensors"));
  Model loaded = load_model((dir / "e3.safetensors").string());
  testing_support::expect_bitwise(testing_support::weights(m), testing_support::weights(loaded),
                                  "saved model");
  fs::remove_all(dir);
}

TEST(TensorBoard, WritesEventFilesThatReadBackWithValidFramingAndChecksums) {
  const fs::path dir = fs::temp_directory_path() / ("lockstep_tb_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  Model m = small_model();
  auto [x, y] = testing_support::blobs(64, 3);
  const History h = m.fit(x, y,
                          {.batch_size = 16,
                           .epochs = 2,
                           .verbose = 0,
                           .callbacks = {std::make_shared<TensorBoard>(dir.string(), 2)},
                           .validation_data = ValidationData{x, y}});
  auto only_file = [](const fs::path& d) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(d)) files.push_back(e.path());
    EXPECT_EQ(files.size(), 1u) << d;
    EXPECT_EQ(files.at(0).filename().string().rfind("events.out.tfevents.", 0), 0u);
    return files.at(0).string();
  };
  std::string version;
  const auto train = io::read_event_file(only_file(dir / "train"), &version);
  EXPECT_EQ(version, "brain.Event:2");
  const auto val = io::read_event_file(only_file(dir / "validation"));
  auto find = [](const std::vector<io::ScalarEvent>& events, const std::string& tag,
                 std::int64_t step) -> std::optional<float> {
    for (const auto& e : events) {
      if (e.tag == tag && e.step == step) return e.value;
    }
    return std::nullopt;
  };
  for (int epoch = 0; epoch < 2; ++epoch) {
    const auto i = static_cast<std::size_t>(epoch);
    EXPECT_EQ(find(train, "epoch_loss", epoch), static_cast<float>(h["loss"][i]));
    EXPECT_EQ(find(train, "epoch_accuracy", epoch), static_cast<float>(h["accuracy"][i]));
    EXPECT_EQ(find(val, "epoch_loss", epoch), static_cast<float>(h["val_loss"][i]));
    EXPECT_TRUE(find(train, "epoch_learning_rate", epoch).has_value());
  }
  // Every 2nd of 8 optimizer steps: 2, 4, 6, 8.
  for (std::int64_t step : {2, 4, 6, 8}) EXPECT_TRUE(find(train, "batch_loss", step)) << step;
  EXPECT_FALSE(find(train, "batch_loss", 3));

  // A flipped byte anywhere is caught by the framing checksums.
  const std::string path = only_file(dir / "train");
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  for (std::size_t i = 0; i < bytes.size(); i += 7) {
    std::string flipped = bytes;
    flipped[i] = static_cast<char>(flipped[i] ^ 0x10);
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out << flipped;
    }
    EXPECT_THROW(io::read_event_file(path), IOError) << "byte " << i;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lockstep

namespace lockstep {
namespace {

// A program that embeds Lockstep routes what fit says (the progress bar,
// Keras's callback lines, warnings) through one sink, or silences it: none
// of it reaches stdout or stderr past the sink (issue #39).
TEST(LogSink, FitsOutputAndWarningsGoThroughTheSinkOnly) {
  Model m = small_model();
  auto [x, y] = testing_support::blobs(32, 1);
  std::vector<std::pair<LogLevel, std::string>> said;
  LogSink previous = set_log_sink(
      [&](LogLevel level, std::string_view text) { said.emplace_back(level, std::string(text)); });
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  m.fit(x, y,
        {.batch_size = 16,
         .epochs = 2,
         .verbose = 2,
         .callbacks = {
             std::make_shared<EarlyStopping>(EarlyStoppingOptions{.monitor = "no_such_metric"})}});
  const std::string out = testing::internal::GetCapturedStdout();
  const std::string err = testing::internal::GetCapturedStderr();
  set_log_sink(std::move(previous));
  EXPECT_EQ(out, "");
  EXPECT_EQ(err, "");
  std::string output, warnings;
  for (const auto& [level, text] : said) (level == LogLevel::kOutput ? output : warnings) += text;
  EXPECT_NE(output.find("Epoch 2/2"), std::string::npos) << output;
  EXPECT_NE(output.find("2/2 - "), std::string::npos) << output;
  EXPECT_NE(warnings.find("conditioned on metric `no_such_metric`"), std::string::npos) << warnings;

  // Silenced: nothing at all.
  said.clear();
  previous = set_log_sink(
      [&](LogLevel level, std::string_view text) { said.emplace_back(level, std::string(text)); });
  const LogLevel level = set_log_level(LogLevel::kOff);
  m.fit(x, y, {.batch_size = 16, .epochs = 2, .verbose = 2});
  set_log_level(level);
  set_log_sink(std::move(previous));
  EXPECT_TRUE(said.empty()) << said.size() << " texts said while silenced";
}

}  // namespace
}  // namespace lockstep
