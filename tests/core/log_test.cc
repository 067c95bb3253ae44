// The log sink (core/log.h): a program routes or silences everything the
// library says in one place; the default prints as before (kOutput to
// stdout, the rest to stderr).
#include "lockstep/core/log.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace lockstep {
namespace {

// Routes the sink into `lines` while alive; puts back what was there.
class Captured {
 public:
  Captured() {
    previous_sink_ = set_log_sink([this](LogLevel level, std::string_view text) {
      lines.emplace_back(level, std::string(text));
    });
    previous_level_ = set_log_level(LogLevel::kDebug);
  }
  ~Captured() {
    set_log_sink(std::move(previous_sink_));
    set_log_level(previous_level_);
  }
  std::vector<std::pair<LogLevel, std::string>> lines;

 private:
  LogSink previous_sink_;
  LogLevel previous_level_;
};

TEST(Log, ASinkGetsEveryTextWithItsLevel) {
  Captured c;
  log(LogLevel::kOutput, "Epoch 1/2\n");
  log(LogLevel::kWarning, "a warning\n");
  ASSERT_EQ(c.lines.size(), 2u);
  EXPECT_EQ(c.lines[0], std::pair(LogLevel::kOutput, std::string("Epoch 1/2\n")));
  EXPECT_EQ(c.lines[1], std::pair(LogLevel::kWarning, std::string("a warning\n")));
}

TEST(Log, TheLevelDropsWhatIsBelowIt) {
  Captured c;
  set_log_level(LogLevel::kWarning);
  log(LogLevel::kInfo, "info\n");
  log(LogLevel::kOutput, "output\n");
  log(LogLevel::kWarning, "warning\n");
  log(LogLevel::kError, "error\n");
  ASSERT_EQ(c.lines.size(), 2u);
  EXPECT_EQ(c.lines[0].second, "warning\n");
  EXPECT_EQ(c.lines[1].second, "error\n");
  EXPECT_FALSE(log_enabled(LogLevel::kOutput));
  set_log_level(LogLevel::kOff);
  log(LogLevel::kError, "error\n");
  EXPECT_EQ(c.lines.size(), 2u);
}

TEST(Log, ALogStreamSendsOneTextPerFlushAndAtItsEnd) {
  Captured c;
  {
    LogStream s(LogLevel::kInfo);
    s << "a " << 1 << "\n" << std::flush;
    s << "b";
  }
  ASSERT_EQ(c.lines.size(), 2u);
  EXPECT_EQ(c.lines[0], std::pair(LogLevel::kInfo, std::string("a 1\n")));
  EXPECT_EQ(c.lines[1], std::pair(LogLevel::kInfo, std::string("b")));
}

TEST(Log, TextsFromSeveralThreadsNeverMix) {
  Captured c;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 200; ++i) log(LogLevel::kInfo, std::string(50, char('a' + t)) + "\n");
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(c.lines.size(), 800u);
  for (const auto& [level, text] : c.lines) EXPECT_EQ(text, std::string(50, text[0]) + "\n");
}

TEST(Log, TheDefaultSinkPrintsOutputToStdoutAndTheRestToStderr) {
  set_log_sink({});  // the default
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  log(LogLevel::kOutput, "to stdout\n");
  log(LogLevel::kInfo, "info to stderr\n");
  log(LogLevel::kWarning, "warning to stderr\n");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "info to stderr\nwarning to stderr\n");
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "to stdout\n");
}

}  // namespace
}  // namespace lockstep
