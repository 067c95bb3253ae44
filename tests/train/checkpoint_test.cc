// Checkpoints: round trips, topology changes, exact resume, damage.
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "lockstep/lockstep.h"
#include "support/files.h"
#include "support/synthetic.h"
#include "support/weights.h"

namespace lockstep {
namespace {

using testing_support::expect_bitwise;
using testing_support::expect_close;
using testing_support::weights;

namespace fs = std::filesystem;
using distribute::MirroredStrategy;
using distribute::Strategy;
using testing_support::TempDir;

Model mlp(std::uint64_t seed = 3) {
  set_random_seed(seed);
  auto in = Input({8});
  auto h = layers::Dense(16, {.activation = "relu"})(in);
  Model m(in, layers::Dense(2)(h));
  m.compile({.optimizer = optimizers::Adam({.learning_rate = 0.01}),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy"}});
  return m;
}

Model mlp_under(const Strategy& strategy, std::uint64_t seed = 3) {
  auto scope = strategy.scope();
  return mlp(seed);
}

Strategy replicas(int n) {
  return MirroredStrategy({.devices = {&host_device()}, .replicas_per_device = n});
}

// A shuffled, seeded dataset of 96 examples in global batches of 12.
data::Dataset training_data() {
  auto [x, y] = testing_support::blobs(96, 11);
  return data::Dataset::from_tensor_slices({x, y}).shuffle(96, {.seed = 5}).batch(12);
}

TEST(Checkpoint, RestoringWeightsAndOptimizerContinuesBitwiseLikeAnUninterruptedRun) {
  TempDir dir;
  auto [x, y] = testing_support::blobs(96, 11);
  const FitOptions first{.batch_size = 12, .epochs = 1, .verbose = 0, .shuffle = false};
  Model straight = mlp();
  straight.fit(x, y, first);
  straight.fit(x, y, first);

  Model a = mlp();
  a.fit(x, y, first);
  Checkpoint(a).save(dir / "a.safetensors");
  Model b = mlp(/*seed=*/99);  // other initial weights, no optimizer state yet
  EXPECT_FALSE(Checkpoint(b).restore(dir / "a.safetensors").has_value());  // saved outside fit
  EXPECT_EQ(b.optimizer().iterations(), 8);
  b.fit(x, y, first);
  expect_bitwise(weights(straight), weights(b), "restored run");
}

TEST(Checkpoint, SavedUnderTwoReplicasRestoresUnderOneAndThree) {
  TempDir dir;
  auto [x, y] = testing_support::blobs(240, 12);
  const FitOptions half{.batch_size = 24, .epochs = 1, .verbose = 0, .shuffle = false};
  Model straight = mlp_under(replicas(2));
  straight.fit(x, y, half);
  straight.fit(x, y, half);

  Model saved = mlp_under(replicas(2));
  saved.fit(x, y, half);
  Checkpoint(saved).save(dir / "two.safetensors");
  const CheckpointInfo info = Checkpoint::read(dir / "two.safetensors");
  EXPECT_EQ(info.replicas, 2);
  EXPECT_EQ(info.strategy, "MirroredStrategy");

  for (int n : {1, 2, 3}) {
    Model m = mlp_under(replicas(n), 77);
    Checkpoint(m).restore(dir / "two.safetensors");
    m.fit(x, y, half);
    if (n == 2) {
      expect_bitwise(weights(straight), weights(m), "2 -> 2 replicas");
    } else {
      expect_close(weights(straight), weights(m), 1e-5, "2 -> " + std::to_string(n));
    }
    for (const Variable& v : m.impl()->weights()) {
      for (int r = 1; r < v.num_replicas(); ++r)
        ASSERT_EQ(0, std::memcmp(v.replica_value(0).raw_data(), v.replica_value(r).raw_data(),
                                 v.replica_value(0).nbytes()));
    }
  }
  // And under no strategy at all.
  Model plain = mlp(55);
  Checkpoint(plain).restore(dir / "two.safetensors");
  plain.fit(x, y, half);
  expect_close(weights(straight), weights(plain), 1e-5, "2 replicas -> no strategy");
}

// Throws from on_train_batch_end once the optimizer has made `at` steps: a
// crash at an arbitrary point of training.
struct CrashAt : Callback {
  explicit CrashAt(std::int64_t at) : at(at) {}
  std::int64_t at;
  void on_train_batch_end(std::int64_t, const Logs&) override {
    if (model()->optimizer().iterations() == at) throw std::runtime_error("simulated crash");
  }
};

void check_resume(const std::function<Model()>& make,
                  const std::function<void(Model&, FitOptions)>& fit,
                  const std::vector<std::int64_t>& crash_points, SaveFreq save_freq,
                  bool save_input_state = false) {
  Model straight = make();
  fit(straight, {.epochs = 3, .verbose = 0});
  const auto want = weights(straight);
  const Logs want_logs = straight.get_metrics_result();
  for (std::int64_t crash : crash_points) {
    TempDir dir;
    std::ostringstream log;
    auto backup = std::make_shared<BackupAndRestore>(
        BackupAndRestore::Options{.backup_dir = dir / "backup",
                                  .save_freq = save_freq,
                                  .save_input_state = save_input_state,
                                  .log = &log});
    {
      Model victim = make();
      EXPECT_THROW(
          fit(victim,
              {.epochs = 3, .verbose = 0, .callbacks = {backup, std::make_shared<CrashAt>(crash)}}),
          std::runtime_error);
    }
    Model resumed = make();
    fit(resumed, {.epochs = 3, .verbose = 0, .callbacks = {backup}});
    const std::string what = "crash after step " + std::to_string(crash);
    expect_bitwise(want, weights(resumed), what);
    EXPECT_EQ(resumed.optimizer().iterations(), straight.optimizer().iterations()) << what;
    const Logs got_logs = resumed.get_metrics_result();
    for (const auto& [k, v] : want_logs) EXPECT_NEAR(got_logs.at(k), v, 1e-12) << what << " " << k;
    if (crash >= (save_freq.per_epoch() ? 8 : save_freq.batches())) {
      EXPECT_NE(log.str().find("resuming from"), std::string::npos) << what << ": " << log.str();
    }
    EXPECT_TRUE(fs::is_empty(dir / "backup")) << "the backup is deleted after a finished run";
  }
}

TEST(BackupAndRestore, ResumesADatasetFitExactlyWhereItStopped) {
  auto fit = [](Model& m, FitOptions o) { m.fit(training_data(), o); };
  // 8 batches per epoch, 24 in all; backups every 5 batches and at epoch ends.
  check_resume([] { return mlp(); }, fit, {3, 5, 8, 11, 16, 23}, 5);
  check_resume([] { return mlp(); }, fit, {7, 9, 20}, "epoch");
  // The input's whole state (shuffle buffer and all) instead of a replay.
  check_resume([] { return mlp(); }, fit, {5, 13}, 4, /*save_input_state=*/true);
}

TEST(BackupAndRestore, ResumesAShuffledTensorFitExactly) {
  auto [x, y] = testing_support::blobs(96, 13);
  auto fit = [&](Model& m, FitOptions o) {
    o.batch_size = 12;
    m.fit(x, y, o);
  };
  check_resume([] { return mlp(); }, fit, {4, 10, 17}, 3);
}

TEST(BackupAndRestore, ResumesUnderMirroredStrategyWithARepeatedDatasetAndStepsPerEpoch) {
  auto fit = [](Model& m, FitOptions o) {
    o.steps_per_epoch = 5;  // one iterator runs on across epochs
    m.fit(training_data().repeat(), o);
  };
  check_resume([] { return mlp_under(replicas(2)); }, fit, {4, 6, 12}, 2);
}

// Two epochs of mlp() backed up every 3 steps, crashed after step 10: the
// crashed process's callback is gone with it (its background write finishes
// first, as a process's last write would have reached the disk).
void crash_at_step_10(const BackupAndRestore::Options& options) {
  Model victim = mlp();
  auto backup = std::make_shared<BackupAndRestore>(options);
  EXPECT_THROW(
      victim.fit(training_data(),
                 {.epochs = 2, .verbose = 0, .callbacks = {backup, std::make_shared<CrashAt>(10)}}),
      std::runtime_error);
}

TEST(BackupAndRestore, FallsBackToThePreviousBackupWhenTheNewestIsDamaged) {
  TempDir dir;
  auto fit = [](Model& m, FitOptions o) { m.fit(training_data(), o); };
  Model straight = mlp();
  fit(straight, {.epochs = 2, .verbose = 0});
  std::ostringstream log;
  const BackupAndRestore::Options options{.backup_dir = dir / "b", .save_freq = 3, .log = &log};
  crash_at_step_10(options);
  // backup-3 (step 9) is the newest; damage one byte of its data.
  const std::string newest = dir / "b/backup-3.safetensors";
  ASSERT_TRUE(fs::exists(newest));
  {
    std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x7f');
  }
  Model resumed = mlp();
  fit(resumed,
      {.epochs = 2, .verbose = 0, .callbacks = {std::make_shared<BackupAndRestore>(options)}});
  expect_bitwise(weights(straight), weights(resumed), "resumed from the previous backup");
  EXPECT_NE(log.str().find("backup-3.safetensors"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("falling back to the previous one"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("backup-2.safetensors at epoch 1, batch 6"), std::string::npos)
      << log.str();
}

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Issue #23, item 8: a newest backup of another model is skipped like a
// damaged one, with the reason; when no backup loads, the start from the
// beginning is said.
TEST(BackupAndRestore, ABackupOfAnotherModelIsSkippedAndStartingOverIsSaid) {
  TempDir dir;
  auto fit = [](Model& m, FitOptions o) { m.fit(training_data(), o); };
  Model straight = mlp();
  fit(straight, {.epochs = 2, .verbose = 0});
  std::ostringstream log;
  const BackupAndRestore::Options options{.backup_dir = dir / "b", .save_freq = 3, .log = &log};
  crash_at_step_10(options);
  // The newest backup (backup-3) replaced by one of a wider model.
  {
    set_random_seed(9);
    auto in = Input({8});
    Model other(in, layers::Dense(2)(layers::Dense(32, {.activation = "relu"})(in)));
    other.compile({.optimizer = "adam", .loss = "sparse_categorical_crossentropy"});
    CheckpointManager manager(Checkpoint(other), {.directory = dir / "other", .prefix = "backup"});
    other.fit(training_data(), {.epochs = 1, .verbose = 0, .steps_per_epoch = 1});
    const std::string path = manager.save();
    fs::copy_file(path, dir / "b/backup-3.safetensors", fs::copy_options::overwrite_existing);
  }
  Model resumed = mlp();
  fit(resumed,
      {.epochs = 2, .verbose = 0, .callbacks = {std::make_shared<BackupAndRestore>(options)}});
  expect_bitwise(weights(straight), weights(resumed), "resumed from the previous backup");
  EXPECT_NE(log.str().find("skipping a checkpoint of another model"), std::string::npos)
      << log.str();
  EXPECT_NE(log.str().find("backup-2.safetensors at epoch 1, batch 6"), std::string::npos)
      << log.str();

  // Every backup damaged: training starts over, and says so.
  write_bytes(dir / "b/backup-4.safetensors", {'x'});
  write_bytes(dir / "b/backup-5.safetensors", {'y', 'z'});
  log.str("");
  Model again = mlp();
  fit(again,
      {.epochs = 2, .verbose = 0, .callbacks = {std::make_shared<BackupAndRestore>(options)}});
  expect_bitwise(weights(straight), weights(again), "started over");
  EXPECT_NE(log.str().find("could be restored; starting from the beginning"), std::string::npos)
      << log.str();
}

TEST(Checkpoint, EverySingleByteFlipAndEveryTruncationIsDetected) {
  TempDir dir;
  set_random_seed(1);
  auto in = Input({3});
  Model m(in, layers::Dense(2)(in));
  m.compile({.optimizer = optimizers::Adam(), .loss = losses::MeanSquaredError()});
  m.fit(random::uniform({4, 3}, {.seed = 1}), random::uniform({4, 2}, {.seed = 2}),
        {.batch_size = 4, .verbose = 0});
  const std::string good = dir / "small.safetensors", bad = dir / "bad.safetensors";
  Checkpoint(m).save(good);
  const std::vector<char> bytes = read_bytes(good);
  ASSERT_GT(bytes.size(), 100u);
  int undetected = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    for (unsigned char mask : {0x01, 0x80}) {
      std::vector<char> flipped = bytes;
      flipped[i] = static_cast<char>(flipped[i] ^ mask);
      write_bytes(bad, flipped);
      try {
        Checkpoint::read(bad);
        ++undetected;
        ADD_FAILURE() << "flip of byte " << i << " (mask " << int(mask) << ") not detected";
      } catch (const IOError& e) {
        const std::string msg = e.what();
        if (msg.find(bad) == std::string::npos || msg.find("byte") == std::string::npos) {
          // Every message names the file and where in it.
          if (msg.find("offset") == std::string::npos)
            ADD_FAILURE() << "byte " << i << ": message lacks file or offset: " << msg;
        }
      }
    }
  }
  EXPECT_EQ(undetected, 0);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    write_bytes(bad, std::vector<char>(bytes.begin(), bytes.begin() + static_cast<long>(n)));
    EXPECT_THROW(Checkpoint::read(bad), IOError) << "truncated to " << n << " bytes";
  }
  EXPECT_NO_THROW(Checkpoint::read(good));
}

TEST(Checkpoint, AnotherArchitectureOrANewerFormatIsRefusedAndNothingChanges) {
  TempDir dir;
  Model m = mlp();
  m.fit(testing_support::blobs(24, 1).first, testing_support::blobs(24, 1).second,
        {.batch_size = 12, .verbose = 0});
  Checkpoint(m).save(dir / "m.safetensors");

  set_random_seed(4);
  auto in = Input({8});
  auto h = layers::Dense(32, {.activation = "relu"})(in);  // 32 units instead of 16
  Model other(in, layers::Dense(2)(h));
  other.compile({.optimizer = optimizers::Adam(),
                 .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  const auto before = weights(other);
  try {
    Checkpoint(other).restore(dir / "m.safetensors");
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[8, 16]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[8, 32]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("kernel"), std::string::npos) << msg;
  }
  expect_bitwise(before, weights(other), "weights untouched");

  // A file from a newer Lockstep.
  io::write_safetensors(dir / "new.safetensors", {{"model/x", Tensor::zeros({1})}},
                        {{"format", "lockstep.checkpoint"}, {"format_version", "7"}});
  try {
    Checkpoint::read(dir / "new.safetensors");
    FAIL() << "expected an IOError";
  } catch (const IOError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("format version 7 is newer than this Lockstep reads (1)"), std::string::npos)
        << msg;
  }
}

TEST(CheckpointManager, KeepsTheNewestAndEveryNthAndNumbersOnAfterARestart) {
  TempDir dir;
  Model m = mlp();
  {
    CheckpointManager manager(Checkpoint(m),
                              {.directory = dir / "c", .max_to_keep = 2, .keep_every_n = 3});
    for (int i = 0; i < 5; ++i) manager.save();
    std::vector<std::string> names;
    for (const auto& p : manager.checkpoints()) names.push_back(fs::path(p).filename().string());
    EXPECT_EQ(names, (std::vector<std::string>{"ckpt-3.safetensors", "ckpt-4.safetensors",
                                               "ckpt-5.safetensors"}));
  }
  CheckpointManager again(Checkpoint(m), {.directory = dir / "c", .max_to_keep = 0});
  EXPECT_EQ(fs::path(again.save()).filename().string(), "ckpt-6.safetensors");
  EXPECT_EQ(fs::path(*again.latest_checkpoint()).filename().string(), "ckpt-6.safetensors");
}

TEST(CheckpointManager, ADiskFullIsAClearErrorAndLosesNothing) {
  // A 200 KiB tmpfs: one checkpoint of this model (~155 KiB with Adam's two
  // slots) fits, a second does not.
  TempDir dir;
  const std::string mount_point = dir / "small_disk";
  fs::create_directories(mount_point);
  if (::mount("tmpfs", mount_point.c_str(), "tmpfs", 0, "size=200k") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno)
                 << "; needs root or CAP_SYS_ADMIN): disk-full is not tested on this machine";
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount(path.c_str()); }
  } unmount{mount_point};
  set_random_seed(1);
  auto in = Input({100});
  Model m(in, layers::Dense(128)(in));
  m.compile({.optimizer = optimizers::Adam(), .loss = losses::MeanSquaredError()});
  m.fit(random::uniform({8, 100}, {.seed = 1}), random::uniform({8, 128}, {.seed = 2}),
        {.batch_size = 8, .verbose = 0});
  CheckpointManager manager(Checkpoint(m), {.directory = mount_point, .max_to_keep = 2});
  const std::string first = manager.save();
  try {
    manager.save();
    FAIL() << "expected an IOError: the disk is full";
  } catch (const IOError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("No space left on device"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ckpt-2.safetensors"), std::string::npos) << msg;
  }
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(mount_point))
    names.push_back(entry.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"ckpt-1.safetensors"}) << "no temporary file left";
  EXPECT_NO_THROW(Checkpoint::read(first));
}

}  // namespace
}  // namespace lockstep
