// The allocator promise: a loop of identical forward/backward steps makes no
// system allocation after the first step (every buffer comes from the cache).
#include <gtest/gtest.h>

#include "lockstep/lockstep.h"

namespace lockstep {
namespace {

TEST(SteadyState, ThousandTrainingStepsAllocateNothingNewAfterTheFirst) {
  random::Generator gen(1);
  const Tensor x = gen.normal({32, 20});
  const Tensor labels =
      Tensor::from_vector<std::int64_t>(std::vector<std::int64_t>(32, 1), {32, 1});
  Variable w1(gen.normal({20, 16}, 0.0f, 0.1f)), b1(Tensor::zeros({16}));
  Variable w2(gen.normal({16, 4}, 0.0f, 0.1f)), b2(Tensor::zeros({4}));
  const std::vector<Variable> params{w1, b1, w2, b2};
  Allocator& alloc = current_device().allocator();

  auto step = [&] {
    GradientTape tape;
    const Tensor h = relu(matmul(x, w1, b1));
    const Tensor loss = mean(neg(take_along_axis(log_softmax(matmul(h, w2, b2)), labels, 1)));
    const auto grads = tape.gradient(loss, params);
    NoGradGuard no_grad;
    for (std::size_t i = 0; i < params.size(); ++i) {
      Variable p = params[i];
      p.assign_sub(mul(grads[i], Tensor::scalar(0.1f)));
    }
    return loss.item<float>();
  };

  const float first_loss = step();
  const auto after_first = alloc.stats();
  float last_loss = first_loss;
  for (int i = 1; i < 1000; ++i) last_loss = step();
  const auto after_all = alloc.stats();
  EXPECT_EQ(after_all.system_allocations, after_first.system_allocations);
  EXPECT_GT(after_all.allocations - after_first.allocations,
            999u * 10);              // the loop did allocate tensors
  EXPECT_LT(last_loss, first_loss);  // and it trained
}

}  // namespace
}  // namespace lockstep
