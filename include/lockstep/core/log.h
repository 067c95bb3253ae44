// The log sink: the one way the library says something that is not an error
// — Keras's printed lines, TensorFlow's INFO lines, a warning (a lost
// worker named, a lock taken over). Library code writes through log() only;
// a program that embeds Lockstep routes or silences all of it in one place.
//
//   lockstep::log(lockstep::LogLevel::kWarning, "fit: the dataset ran out of data\n");
//   lockstep::set_log_sink([](lockstep::LogLevel level, std::string_view text) {
//     my_logger.write(level, text);               // route: every line comes here
//   });
//   lockstep::set_log_level(lockstep::LogLevel::kWarning);  // or quieter
//
// Levels, as Python's programs split them: kOutput is what Keras print()s
// (a progress bar, "Epoch 3: saving model to …", "Found 2000 files
// belonging to 2 classes."), kInfo what TensorFlow logs at INFO
// ("INFO:lockstep:loss = …", a resume), kWarning and kError the rest. Texts
// are passed as written, newlines included (a progress bar rewrites its line
// with "\r"). The default sink prints as Lockstep always has: kOutput to
// stdout, every other level to stderr, each text at once. Thread-safe: the
// sink is called under one lock, so texts from replica threads never mix
// (and a sink must not call log() itself).
#pragma once

#include <functional>
#include <ostream>
#include <sstream>
#include <string_view>

namespace lockstep {

enum class LogLevel { kDebug = 0, kInfo = 1, kOutput = 2, kWarning = 3, kError = 4, kOff = 5 };

using LogSink = std::function<void(LogLevel level, std::string_view text)>;

// Writes `text` through the sink if `level` is at or above the log level.
void log(LogLevel level, std::string_view text);
// Whether a text of `level` would reach the sink (to skip formatting it).
bool log_enabled(LogLevel level);

// Replaces the sink (an empty function: the default one) and returns the one
// it replaced (empty when that was the default).
LogSink set_log_sink(LogSink sink);
// Texts below `level` are dropped (default kInfo; kWarning keeps only
// warnings and errors; kOff drops everything).
// Returns the previous level.
LogLevel set_log_level(LogLevel level);

// A stream onto the sink: what is written is sent as one text at each flush
// (std::flush, std::endl) and when the stream ends. For library code that
// writes to a stream its caller may give:
//   LogStream fallback(LogLevel::kOutput);
//   std::ostream& out = options.out ? *options.out : fallback;
class LogStream : public std::ostream {
 public:
  explicit LogStream(LogLevel level) : std::ostream(&buf_), buf_(level) {}
  ~LogStream() override { buf_.pubsync(); }
  LogStream(const LogStream&) = delete;
  LogStream& operator=(const LogStream&) = delete;

 private:
  class Buf : public std::stringbuf {
   public:
    explicit Buf(LogLevel level) : level_(level) {}
    int sync() override {
      log(level_, view());
      str(std::string());
      return 0;
    }

   private:
    LogLevel level_;
  };
  Buf buf_;
};

}  // namespace lockstep
