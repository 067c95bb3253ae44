// A custom training loop with GradientTape: a two-layer MLP learns a
// nonlinear function of synthetic data, printing its falling loss.
//
// This is the pattern of the TensorFlow guide's custom-loop example on raw
// variables, without a strategy (examples/custom_loop.cc has the guide's
// loop under MirroredStrategy):
//
//   with tf.GradientTape() as tape:
//     loss = loss_fn(y, model(x))
//   grads = tape.gradient(loss, model.trainable_variables)
//   optimizer.apply_gradients(zip(grads, model.trainable_variables))
#include <cmath>
#include <cstdio>
#include <vector>

#include "lockstep/lockstep.h"

namespace ls = lockstep;

int main() {
  constexpr std::int64_t kExamples = 4096, kFeatures = 8, kHidden = 64, kBatch = 128;
  constexpr int kEpochs = 30;

  std::printf("Lockstep %s — GradientTape regression example\n", "0.1.0");
  std::printf("Number of devices: %zu\n", ls::logical_devices().size());

  // Synthetic data: y = sin(x0) + x1·x2 − 0.5·x3² + noise.
  ls::random::Generator data_rng(2026);
  const ls::Tensor x = data_rng.uniform({kExamples, kFeatures}, -2.0f, 2.0f);
  const ls::Tensor noise = data_rng.normal({kExamples}, 0.0f, 0.05f);
  std::vector<float> targets(kExamples);
  {
    const float* px = x.data<float>();
    const float* pn = noise.data<float>();
    for (std::int64_t i = 0; i < kExamples; ++i) {
      const float* r = px + i * kFeatures;
      targets[static_cast<std::size_t>(i)] =
          std::sin(r[0]) + r[1] * r[2] - 0.5f * r[3] * r[3] + pn[i];
    }
  }
  const ls::Tensor y = ls::Tensor::from_vector(targets, {kExamples, 1});

  // Parameters: He-style initialisation from a seeded generator.
  ls::random::Generator init_rng(7);
  ls::Variable w1(init_rng.normal({kFeatures, kHidden}, 0.0f, std::sqrt(2.0f / kFeatures)),
                  {.name = "dense/kernel"});
  ls::Variable b1(ls::Tensor::zeros({kHidden}), {.name = "dense/bias"});
  ls::Variable w2(init_rng.normal({kHidden, 1}, 0.0f, std::sqrt(1.0f / kHidden)),
                  {.name = "dense_1/kernel"});
  ls::Variable b2(ls::Tensor::zeros({1}), {.name = "dense_1/bias"});
  const std::vector<ls::Variable> params{w1, b1, w2, b2};
  ls::optimizers::SGD optimizer({.learning_rate = 0.05, .momentum = 0.9});

  ls::Timer timer;
  float first_loss = 0.0f, loss_value = 0.0f;
  for (int epoch = 1; epoch <= kEpochs; ++epoch) {
    double epoch_loss = 0.0;
    for (std::int64_t start = 0; start < kExamples; start += kBatch) {
      const ls::Tensor xb = x.view_rows(start, start + kBatch);  // zero-copy batch
      const ls::Tensor yb = y.view_rows(start, start + kBatch);
      std::vector<ls::Tensor> grads;
      {
        ls::GradientTape tape;
        const ls::Tensor hidden = ls::tanh(ls::matmul(xb, w1, b1));
        const ls::Tensor prediction = ls::matmul(hidden, w2, b2);
        const ls::Tensor loss = ls::mean(ls::square(prediction - yb));
        grads = tape.gradient(loss, params);
        loss_value = loss.item<float>();
      }
      optimizer.apply_gradients(grads, params);
      epoch_loss += loss_value;
    }
    const double mean_loss = epoch_loss / (kExamples / kBatch);
    if (epoch == 1) first_loss = static_cast<float>(mean_loss);
    if (epoch == 1 || epoch % 5 == 0) {
      std::printf("Epoch %d/%d - loss: %.4f\n", epoch, kEpochs, mean_loss);
    }
  }
  std::printf("Trained %d epochs in %.2fs: loss %.4f -> %.4f\n", kEpochs, timer.seconds(),
              first_loss, loss_value);
  return loss_value < first_loss ? 0 : 1;  // a loss that did not fall is a failed run
}
