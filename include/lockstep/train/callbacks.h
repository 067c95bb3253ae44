// Callbacks (keras.callbacks.Callback): hooks into fit, evaluate, predict.
//
//   struct Printer : ls::Callback {
//     void on_epoch_end(int epoch, const ls::Logs& logs) override { ... }
//   };
//   model.fit(x, y, {.callbacks = {std::make_shared<Printer>()}});
//
// Epochs and batches are 0-based, as in Keras. A callback may stop training
// by calling model()->stop_training() from any hook.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/train/logs.h"
#include "lockstep/train/progbar.h"

namespace lockstep {

class Model;

// What fit/evaluate/predict tell callbacks before they start.
struct CallbackParams {
  int epochs = 1;
  std::int64_t steps = 0;  // steps per epoch (or per evaluate/predict run)
  int verbose = 1;
};

class Callback {
 public:
  virtual ~Callback() = default;
  virtual void set_params(const CallbackParams& params) { params_ = params; }
  virtual void set_model(Model* model) { model_ = model; }

  virtual void on_train_begin(const Logs&) {}
  virtual void on_train_end(const Logs&) {}
  virtual void on_epoch_begin(int /*epoch*/, const Logs&) {}
  virtual void on_epoch_end(int /*epoch*/, const Logs&) {}
  virtual void on_train_batch_begin(std::int64_t /*batch*/, const Logs&) {}
  virtual void on_train_batch_end(std::int64_t /*batch*/, const Logs&) {}
  virtual void on_test_begin(const Logs&) {}
  virtual void on_test_end(const Logs&) {}
  virtual void on_test_batch_begin(std::int64_t /*batch*/, const Logs&) {}
  virtual void on_test_batch_end(std::int64_t /*batch*/, const Logs&) {}
  virtual void on_predict_begin(const Logs&) {}
  virtual void on_predict_end(const Logs&) {}
  virtual void on_predict_batch_begin(std::int64_t /*batch*/, const Logs&) {}
  virtual void on_predict_batch_end(std::int64_t /*batch*/, const Logs&) {}

  // Whether this callback acts in on_train_batch_begin / _end (Keras's
  // _implements_train_batch_hooks). Under ParameterServerStrategy fit has
  // no batches on the coordinator (workers run them) and refuses a callback
  // that does; a callback that acts at epoch ends only says false.
  virtual bool implements_train_batch_hooks() const { return true; }

 protected:
  Model* model() const { return model_; }
  const CallbackParams& params() const { return params_; }

 private:
  Model* model_ = nullptr;
  CallbackParams params_;
};

// Records every epoch's logs; fit returns it.
class History : public Callback {
 public:
  void on_train_begin(const Logs&) override {}
  void on_epoch_end(int epoch, const Logs& logs) override;
  bool implements_train_batch_hooks() const override { return false; }
  // name -> one value per epoch, in the order names first appeared.
  const std::vector<std::pair<std::string, std::vector<double>>>& history() const {
    return history_;
  }
  const std::vector<double>& operator[](const std::string& name) const;
  const std::vector<int>& epochs() const { return epochs_; }

 private:
  std::vector<std::pair<std::string, std::vector<double>>> history_;
  std::vector<int> epochs_;
};

// Prints Keras's progress lines (added by fit/evaluate/predict when
// verbose != 0). Validation inside fit is silent, as in Keras.
class ProgbarLogger : public Callback {
 public:
  explicit ProgbarLogger(Progbar::Options base = {}) : base_(std::move(base)) {}
  void set_params(const CallbackParams& params) override;
  void on_train_begin(const Logs&) override { in_fit_ = true; }
  void on_test_begin(const Logs&) override;
  void on_predict_begin(const Logs&) override;
  void on_epoch_begin(int epoch, const Logs&) override;
  void on_train_batch_end(std::int64_t batch, const Logs& logs) override { update(batch, logs); }
  void on_test_batch_end(std::int64_t batch, const Logs& logs) override;
  void on_predict_batch_end(std::int64_t batch, const Logs&) override { update(batch, {}); }
  void on_epoch_end(int, const Logs& logs) override { finalize(logs); }
  void on_test_end(const Logs& logs) override;
  void on_predict_end(const Logs&) override { finalize({}); }
  // A bar that only moves at epoch ends is still a bar.
  bool implements_train_batch_hooks() const override { return false; }

 private:
  void reset();
  void update(std::int64_t batch, const Logs& logs);
  void finalize(const Logs& logs);

  Progbar::Options base_;
  std::unique_ptr<Progbar> progbar_;
  std::int64_t seen_ = 0;
  std::int64_t target_ = 0;
  int epochs_ = 1;
  int verbose_ = 1;
  bool in_fit_ = false;
};

}  // namespace lockstep
