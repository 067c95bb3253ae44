// Progress lines byte for byte, against strings worked out by hand from
// Keras 3's Progbar (keras/src/utils/progbar.py) with a fixed clock.
#include <gtest/gtest.h>

#include <sstream>

#include "lockstep/lockstep.h"

namespace lockstep {
namespace {

struct FakeClock {
  double t = 1000.0;
  Progbar::Clock fn() {
    return [this] { return t; };
  }
};

TEST(Progbar, Verbose2EpochLineAsKeras) {
  FakeClock clock;
  std::ostringstream out;
  Progbar bar(782, {.verbose = 2, .out = &out, .clock = clock.fn()});
  clock.t += 5.4;  // 782 steps in 5.4 s: 6.9 ms/step (verbose 2 counts the first step)
  bar.update(782,
             {{"loss", 0.57741}, {"sparse_categorical_accuracy", 0.92594}, {"val_loss", 0.0004}},
             true);
  EXPECT_EQ(out.str(),
            "782/782 - 5s - 7ms/step - loss: 0.5774 - sparse_categorical_accuracy: 0.9259 - "
            "val_loss: 4.0000e-04\n");
}

TEST(Progbar, TimeUnitsSwitch) {
  for (auto [seconds, steps, expected] :
       {std::tuple<double, int, const char*>{3.0, 2, " - 2s/step"},
        {0.5, 1000, " - 500us/step"},
        {0.03, 3, " - 10ms/step"}}) {
    FakeClock clock;
    std::ostringstream out;
    Progbar bar(steps, {.verbose = 2, .out = &out, .clock = clock.fn()});
    clock.t += seconds;
    bar.update(steps, {}, true);
    EXPECT_NE(out.str().find(expected), std::string::npos) << out.str();
  }
}

TEST(Progbar, Verbose1LiveBarAsKeras) {
  FakeClock clock;
  std::ostringstream out;
  Progbar bar(3, {.verbose = 1, .out = &out, .clock = clock.fn()});
  const std::string bold = "\x1b[1m", reset = "\x1b[0m", green = "\x1b[32m", white = "\x1b[37m";
  auto bars = [](int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += "\u2501";
    return s;
  };
  clock.t = 1000.2;
  bar.update(1, {{"loss", 0.5}}, false);
  std::string want = "\r" + bold + "1/3" + reset + " " + green + bars(6) + reset + white +
                     bars(14) + reset + " " + bold + "0s" + reset + " 200ms/step - loss: 0.5000";
  EXPECT_EQ(out.str(), want);
  out.str("");
  clock.t = 1000.3;  // the first step is left out of the per-step time from here on
  bar.update(2, {{"loss", 0.3}}, false);
  want = std::string(53, '\b') + "\r" + bold + "2/3" + reset + " " + green + bars(13) + reset +
         white + bars(7) + reset + " " + bold + "0s" + reset +
         " 100ms/step - loss: 0.4000";  // running average of 0.5 and 0.3
  EXPECT_EQ(out.str(), want);
  out.str("");
  clock.t = 1000.5;
  bar.update(3, {{"loss", 0.25}}, true);  // the final value is shown as given
  want = std::string(53, '\b') + "\r" + bold + "3/3" + reset + " " + green + bars(20) + reset +
         white + reset + " " + bold + "0s" + reset + " 150ms/step - loss: 0.2500\n";
  EXPECT_EQ(out.str(), want);
}

TEST(Progbar, LoggerPrintsEpochHeadersAndStaysSilentForValidation) {
  std::ostringstream out;
  FakeClock clock;
  ProgbarLogger logger({.out = &out, .clock = clock.fn()});
  logger.set_params({.epochs = 2, .steps = 4, .verbose = 2});
  logger.on_train_begin({});
  logger.on_epoch_begin(0, {});
  for (int b = 0; b < 4; ++b) logger.on_train_batch_end(b, {{"loss", 1.0}});
  logger.on_test_begin({});
  logger.on_test_batch_end(0, {{"loss", 9.0}});
  logger.on_test_end({{"loss", 9.0}});
  clock.t += 2.0;
  logger.on_epoch_end(0, {{"loss", 0.5}, {"val_loss", 0.25}});
  EXPECT_EQ(out.str(), "Epoch 1/2\n4/4 - 2s - 500ms/step - loss: 0.5000 - val_loss: 0.2500\n");
}

}  // namespace
}  // namespace lockstep
