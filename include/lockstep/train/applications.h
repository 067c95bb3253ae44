// keras.applications: ready-made networks as Models, with weights from
// Keras's files.
//
//   auto base = ls::applications::MobileNetV2({.input_shape = ls::Shape{96, 96, 3},
//                                              .alpha = 0.35,
//                                              .include_top = false,
//                                              .weights = "mobilenet_v2_0.35_96.weights.h5"});
//   base.set_trainable(false);                       // fine-tuning: freeze the base
//   auto inputs = ls::Input({96, 96, 3});
//   auto x = base(inputs);                           // ... a new head on top
//
// The graphs are nn's (lockstep/nn/applications/); loading weights is the
// Model's (load_weights: .keras, .weights.h5, legacy .h5).
#pragma once

#include "lockstep/nn/applications/mobilenet_v2.h"
#include "lockstep/train/model.h"

namespace lockstep::applications {

// keras.applications.MobileNetV2: the network of `options`, uncompiled,
// with the weights of options.weights when it names a file (checked before
// any weight changes: an IOError or ValueError naming the file otherwise).
// alpha 1.0, include_top = false, 224 × 224 × 3: 2,257,984 parameters
// (34,112 non-trainable), output 7 × 7 × 1280.
Model MobileNetV2(const MobileNetV2Options& options = {});

}  // namespace lockstep::applications
