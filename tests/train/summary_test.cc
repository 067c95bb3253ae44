// summary() byte for byte against Keras 3's tables (captured from Keras
// 3.15.1 with stdout not a terminal: 76 columns), and the parameter counts
// after freezing and training.
#include <gtest/gtest.h>

#include <sstream>

#include "lockstep/lockstep.h"

namespace lockstep {
namespace {

TEST(Summary, SeedMlpTableAsKeras) {
  clear_session();
  Model model = zoo::seed_mlp();
  std::ostringstream out;
  model.summary(out, {.line_length = 76});
  EXPECT_EQ(out.str(),
            "Model: \"functional\"\n"
            "┏━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━┓\n"
            "┃ Layer (type)                    ┃ Output Shape           ┃       Param # ┃\n"
            "┡━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━┩\n"
            "│ input_layer (InputLayer)        │ (None, 784)            │             0 │\n"
            "├─────────────────────────────────┼────────────────────────┼───────────────┤\n"
            "│ dense (Dense)                   │ (None, 256)            │       200,960 │\n"
            "├─────────────────────────────────┼────────────────────────┼───────────────┤\n"
            "│ dense_1 (Dense)                 │ (None, 256)            │        65,792 │\n"
            "├─────────────────────────────────┼────────────────────────┼───────────────┤\n"
            "│ dense_2 (Dense)                 │ (None, 10)             │         2,570 │\n"
            "└─────────────────────────────────┴────────────────────────┴───────────────┘\n"
            " Total params: 269,322 (1.03 MB)\n"
            " Trainable params: 269,322 (1.03 MB)\n"
            " Non-trainable params: 0 (0.00 B)\n");
}

// A static batch size (a stateful model's, Keras's Input(batch_shape=...))
// is every shape's first dimension: Keras 3.15.1's table for
// Sequential([Input(batch_shape=(4, 10, 8)), LSTM(16, stateful=True),
// Dense(2)]).
TEST(Summary, AStaticBatchSizeIsEveryShapesFirstDimensionAsKeras) {
  clear_session();
  Sequential model({layers::LSTM(16, {.stateful = true}), layers::Dense(2)},
                   {.input_shape = Shape{10, 8}, .batch_size = 4});
  std::ostringstream out;
  model.summary(out, {.line_length = 76});
  EXPECT_EQ(out.str(),
            "Model: \"sequential\"\n"
            "┏━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━┓\n"
            "┃ Layer (type)                    ┃ Output Shape           ┃       Param # ┃\n"
            "┡━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━┩\n"
            "│ lstm (LSTM)                     │ (4, 16)                │         1,600 │\n"
            "├─────────────────────────────────┼────────────────────────┼───────────────┤\n"
            "│ dense (Dense)                   │ (4, 2)                 │            34 │\n"
            "└─────────────────────────────────┴────────────────────────┴───────────────┘\n"
            " Total params: 1,634 (6.38 KB)\n"
            " Trainable params: 1,634 (6.38 KB)\n"
            " Non-trainable params: 0 (0.00 B)\n");
}

// Keras 3.15.1's output for the same graph (two inputs, so not a chain):
// depth-ordered rows, wrapped cells, "…" for a word too long for its column.
TEST(Summary, GraphWithConnectionsAsKeras) {
  clear_session();
  auto inputs = Input({784});
  Model first(inputs, layers::Dense(10)(inputs));  // takes "functional", "dense", "input_layer"
  (void)first;
  auto a = Input({4}), b = Input({4});
  auto dense = layers::Dense(4, {.name = "dense_3"});
  Model model({a, b}, {layers::Add()({dense(a), b})});
  std::ostringstream out;
  model.summary(out, {.line_length = 76});
  EXPECT_EQ(out.str(),
            "Model: \"functional_1\"\n"
            "┏━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━┓\n"
            "┃ Layer (type)        ┃ Output Shape      ┃    Param # ┃ Connected to      ┃\n"
            "┡━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━┩\n"
            "│ input_layer_1       │ (None, 4)         │          0 │ -                 │\n"
            "│ (InputLayer)        │                   │            │                   │\n"
            "├─────────────────────┼───────────────────┼────────────┼───────────────────┤\n"
            "│ dense_3 (Dense)     │ (None, 4)         │         20 │ input_layer_1[0]… │\n"
            "├─────────────────────┼───────────────────┼────────────┼───────────────────┤\n"
            "│ input_layer_2       │ (None, 4)         │          0 │ -                 │\n"
            "│ (InputLayer)        │                   │            │                   │\n"
            "├─────────────────────┼───────────────────┼────────────┼───────────────────┤\n"
            "│ add (Add)           │ (None, 4)         │          0 │ dense_3[0][0],    │\n"
            "│                     │                   │            │ input_layer_2[0]… │\n"
            "└─────────────────────┴───────────────────┴────────────┴───────────────────┘\n"
            " Total params: 20 (80.00 B)\n"
            " Trainable params: 20 (80.00 B)\n"
            " Non-trainable params: 0 (0.00 B)\n");
}

TEST(Summary, CountsFrozenAndOptimizerParams) {
  layers::Dense base(4), head(2);
  Sequential model({base, head}, {.input_shape = Shape{3}});
  base.set_trainable(false);
  model.compile({.optimizer = optimizers::Adam(), .loss = losses::MeanSquaredError()});
  model.train_on_batch(Tensor::zeros({2, 3}), Tensor::zeros({2, 2}));
  std::ostringstream out;
  model.summary(out, {.line_length = 76});
  const std::string s = out.str();
  EXPECT_NE(s.find(" Trainable params: 10 (40.00 B)\n"), std::string::npos) << s;
  EXPECT_NE(s.find(" Non-trainable params: 16 (64.00 B)\n"), std::string::npos) << s;
  // Adam: two slots per trainable weight, plus its step counter and rate.
  EXPECT_NE(s.find(" Optimizer params: 22 (92.00 B)\n"), std::string::npos) << s;
  EXPECT_NE(s.find(" Total params: 48 (196.00 B)\n"), std::string::npos) << s;
}

// A layer with several outputs (an LSTM with return_state) shows the list
// of their shapes, as Keras 3.15.1 prints it.
TEST(Summary, ALayerWithSeveralOutputsShowsEachShapeAsKeras) {
  clear_session();
  auto x = Input({5, 3});
  const auto outs = layers::LSTM(4, {.return_sequences = true, .return_state = true}).call_all(x);
  Model model({x}, {layers::Dense(2)(outs[0]), outs[2]});
  std::ostringstream out;
  model.summary(out, {.line_length = 76});
  EXPECT_EQ(out.str(),
            "Model: \"functional\"\n"
            "┏━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━┓\n"
            "┃ Layer (type)                    ┃ Output Shape           ┃       Param # ┃\n"
            "┡━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━┩\n"
            "│ input_layer (InputLayer)        │ (None, 5, 3)           │             0 │\n"
            "├─────────────────────────────────┼────────────────────────┼───────────────┤\n"
            "│ lstm (LSTM)                     │ [(None, 5, 4), (None,  │           128 │\n"
            "│                                 │ 4), (None, 4)]         │               │\n"
            "├─────────────────────────────────┼────────────────────────┼───────────────┤\n"
            "│ dense (Dense)                   │ (None, 5, 2)           │            10 │\n"
            "└─────────────────────────────────┴────────────────────────┴───────────────┘\n"
            " Total params: 138 (552.00 B)\n"
            " Trainable params: 138 (552.00 B)\n"
            " Non-trainable params: 0 (0.00 B)\n");
}

}  // namespace
}  // namespace lockstep
