// The per-step log of `lockstep train --step-log` (step_log.h): a callback
// holding the file open in append mode.
#include "step_log.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace lockstep::cli {
namespace {

class StepLog : public Callback {
 public:
  explicit StepLog(const std::string& path) : path_(path) {
    file_ = std::fopen(path.c_str(), "a");
    LOCKSTEP_CHECK_AS(IOError, file_ != nullptr, "--step-log ", path,
                      ": cannot open it to append (", std::strerror(errno), ")");
    if (std::ftell(file_) == 0) write("epoch,step,loss\n");
  }
  ~StepLog() override {
    if (file_ != nullptr) std::fclose(file_);
  }
  StepLog(const StepLog&) = delete;
  StepLog& operator=(const StepLog&) = delete;

  void on_epoch_begin(int epoch, const Logs&) override { epoch_ = epoch; }
  void on_train_batch_end(std::int64_t, const Logs& logs) override {
    const std::optional<double> loss = logs.get("loss");
    if (!loss || model() == nullptr) return;
    char line[96];
    std::snprintf(line, sizeof line, "%d,%lld,%.17g\n", epoch_ + 1,
                  static_cast<long long>(model()->optimizer().iterations()), *loss);
    write(line);
  }

 private:
  void write(const char* text) {
    const bool ok = std::fputs(text, file_) >= 0 && std::fflush(file_) == 0;
    LOCKSTEP_CHECK_AS(IOError, ok, "--step-log ", path_, ": writing failed (", std::strerror(errno),
                      ")");
  }

  std::string path_;
  std::FILE* file_ = nullptr;
  int epoch_ = 0;
};

}  // namespace

std::shared_ptr<Callback> step_log(const std::string& path) {
  return std::make_shared<StepLog>(path);
}

}  // namespace lockstep::cli
