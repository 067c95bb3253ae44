// History and ProgbarLogger (keras/src/callbacks/progbar_logger.py).
#include "lockstep/train/callbacks.h"

#include <iostream>

#include "lockstep/core/error.h"
#include "lockstep/core/log.h"

namespace lockstep {

void History::on_epoch_end(int epoch, const Logs& logs) {
  epochs_.push_back(epoch);
  for (const auto& [name, value] : logs) {
    auto it = history_.begin();
    while (it != history_.end() && it->first != name) ++it;
    if (it == history_.end()) {
      history_.emplace_back(name, std::vector<double>{});
      it = std::prev(history_.end());
    }
    it->second.push_back(value);
  }
}

const std::vector<double>& History::operator[](const std::string& name) const {
  for (const auto& [n, values] : history_) {
    if (n == name) return values;
  }
  std::string names;
  for (const auto& [n, v] : history_) names += (names.empty() ? "" : ", ") + n;
  detail::throw_error<ValueError>("History has no entry '", name,
                                  "'; present: ", names.empty() ? "(none)" : names);
}

void ProgbarLogger::set_params(const CallbackParams& params) {
  Callback::set_params(params);
  verbose_ = params.verbose;
  epochs_ = params.epochs;
  target_ = params.steps;
}

void ProgbarLogger::reset() {
  seen_ = 0;
  progbar_.reset();
}

void ProgbarLogger::on_test_begin(const Logs&) {
  if (in_fit_) return;
  reset();
}

void ProgbarLogger::on_predict_begin(const Logs&) { reset(); }

void ProgbarLogger::on_epoch_begin(int epoch, const Logs&) {
  reset();
  Progbar::Options o = base_;
  o.verbose = verbose_;
  progbar_ = std::make_unique<Progbar>(target_, o);
  if (verbose_ && epochs_ > 1) {
    LogStream fallback(LogLevel::kOutput);
    std::ostream& out = base_.out ? *base_.out : fallback;
    out << "Epoch " << epoch + 1 << "/" << epochs_ << "\n" << std::flush;
  }
}

void ProgbarLogger::on_test_batch_end(std::int64_t batch, const Logs& logs) {
  if (!in_fit_) update(batch, logs);
}

void ProgbarLogger::on_test_end(const Logs& logs) {
  if (!in_fit_) finalize(logs);
}

void ProgbarLogger::update(std::int64_t batch, const Logs& logs) {
  if (!progbar_) {
    Progbar::Options o = base_;
    o.verbose = verbose_;
    progbar_ = std::make_unique<Progbar>(target_, o);
  }
  seen_ = batch + 1;
  if (verbose_ == 1) progbar_->update(seen_, logs, false);
}

void ProgbarLogger::finalize(const Logs& logs) {
  if (!progbar_) {
    Progbar::Options o = base_;
    o.verbose = verbose_;
    progbar_ = std::make_unique<Progbar>(target_, o);
  }
  if (target_ <= 0) {
    target_ = seen_;
    progbar_->set_target(target_);
  }
  progbar_->update(target_, logs, true);
}

}  // namespace lockstep
