// Bad input to ops: each is a lockstep::Error whose message names the op and
// the offending shapes or values — never a crash or silent garbage.
#include <gtest/gtest.h>

#include <functional>

#include "lockstep/lockstep.h"

namespace lockstep {
namespace {

// Runs f, expecting an exception of type E whose message contains every
// fragment.
template <typename E>
void expect_error(const std::function<void()>& f, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one containing '" << fragments[0] << "'";
  } catch (const E& e) {
    for (const auto& frag : fragments) {
      EXPECT_NE(std::string(e.what()).find(frag), std::string::npos)
          << "message '" << e.what() << "' lacks '" << frag << "'";
    }
  }
}

TEST(BadInput, MismatchedShapesNameOpAndBothShapes) {
  const Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4});
  expect_error<ShapeError>([&] { add(a, b); }, {"add", "[2, 3]", "[4]", "cannot be broadcast"});
  expect_error<ShapeError>(
      [&] {
        matmul(Tensor::zeros({64, 28}), Tensor::zeros({784, 256}));
      },
      {"matmul", "[64, 28]", "[784, 256]", "K = 28", "K = 784"});
  expect_error<ShapeError>(
      [&] {
        matmul(a, Tensor::zeros({3, 2}), Tensor::zeros({5}));
      },
      {"matmul", "bias", "[2]", "[5]"});
  expect_error<ShapeError>([&] { reshape(a, {4, 2}); }, {"reshape", "[2, 3]", "[4, 2]"});
  expect_error<ShapeError>(
      [&] {
        concat({a, Tensor::zeros({3, 3})}, 1);
      },
      {"concat", "[3, 3]", "[2, 3]"});
  expect_error<ShapeError>([&] { where(Tensor::zeros({5}, DType::kBool), a, a); },
                           {"where", "[5]", "[2, 3]"});
  expect_error<ShapeError>([&] { broadcast_to(a, {3, 3}); }, {"broadcast_to", "[2, 3]", "[3, 3]"});
}

TEST(BadInput, WrongDtypeNamesBoth) {
  const Tensor f = Tensor::zeros({2}), i = Tensor::zeros({2}, DType::kInt32);
  expect_error<ValueError>([&] { add(f, i); }, {"add", "float32", "int32", "Hint"});
  expect_error<ValueError>([&] { lockstep::exp(i); }, {"exp", "float32", "int32"});
  expect_error<ValueError>([&] { matmul(i, i); }, {"matmul", "float32", "int32"});
  expect_error<ValueError>([&] { gather(f, f); }, {"gather", "int32, int64 or uint8", "float32"});
  expect_error<ValueError>([&] { where(f, f, f); }, {"where", "bool", "float32"});
  expect_error<ValueError>([&] { div(i, i); }, {"div", "float32"});
}

TEST(BadInput, OutOfRangeAxis) {
  const Tensor x = Tensor::zeros({2, 3});
  expect_error<IndexError>([&] { sum(x, {.axes = {2}}); }, {"sum", "axis 2", "rank 2"});
  expect_error<IndexError>([&] { softmax(x, -3); }, {"softmax", "axis -3"});
  expect_error<IndexError>([&] { argmax(x, 5); }, {"argmax", "axis 5"});
  expect_error<IndexError>([&] { transpose(x, {0, 0}); }, {"transpose", "twice"});
  expect_error<IndexError>([&] { sum(x, {.axes = {1, -1}}); }, {"sum", "twice"});
  expect_error<IndexError>([&] { slice(x, {1, 0}, {2, 3}); }, {"slice", "[1, 3)", "axis 0"});
}

TEST(BadInput, IndexOutOfRangeNamesPositionAndValue) {
  const Tensor params = Tensor::zeros({10, 4});
  expect_error<IndexError>(
      [&] {
        gather(params, Tensor::from_vector<std::int64_t>({1, 2, 3, 12}));
      },
      {"gather", "index 12", "position 3", "size 10", "[10, 4]"});
  expect_error<IndexError>([&] { gather(params, Tensor::from_vector<std::int32_t>({-1})); },
                           {"index -1"});
  expect_error<IndexError>(
      [&] {
        take_along_axis(Tensor::zeros({2, 10}), Tensor::from_vector<std::int64_t>({3, 10}, {2, 1}),
                        1);
      },
      {"take_along_axis", "index 10", "position 1", "size 10"});
  expect_error<IndexError>(
      [&] {
        one_hot(Tensor::from_vector<std::int64_t>({0, 5}), 5);
      },
      {"one_hot", "index 5"});
  expect_error<ShapeError>(
      [&] {
        take_along_axis(Tensor::zeros({2, 10}), Tensor::zeros({2}, DType::kInt64), 1);
      },
      {"take_along_axis", "Hint", "[batch, 1]"});
}

TEST(BadInput, UndefinedTensorsAndBadOptions) {
  expect_error<ValueError>([] { add(Tensor(), Tensor::zeros({1})); }, {"add", "undefined"});
  expect_error<ValueError>([] { clip(Tensor::zeros({1}), 2.0f, 1.0f); }, {"clip", "min_value"});
  expect_error<ValueError>(
      [] {
        lockstep::max(Tensor::zeros({0, 3}), {.axes = {0}});
      },
      {"max", "size 0"});
  expect_error<ValueError>([] { one_hot(Tensor::zeros({1}, DType::kInt32), 0); },
                           {"one_hot", "depth"});
}

}  // namespace
}  // namespace lockstep
