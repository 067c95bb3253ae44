// The umbrella header: everything a Lockstep user needs.
//
//   #include <lockstep/lockstep.h>
//   namespace ls = lockstep;
#pragma once

#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/autodiff/variable.h"
#include "lockstep/core/dtype.h"
#include "lockstep/core/error.h"
#include "lockstep/core/shape.h"
#include "lockstep/core/timer.h"
#include "lockstep/data/datasets.h"
#include "lockstep/data/idx.h"
#include "lockstep/io/safetensors.h"
#include "lockstep/nn/config.h"
#include "lockstep/nn/conv_layers.h"
#include "lockstep/nn/functional.h"
#include "lockstep/nn/initializers.h"
#include "lockstep/nn/layer.h"
#include "lockstep/nn/layers.h"
#include "lockstep/nn/losses.h"
#include "lockstep/nn/metrics.h"
#include "lockstep/optim/optimizers.h"
#include "lockstep/optim/schedules.h"
#include "lockstep/tensor/device.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/random.h"
#include "lockstep/tensor/tensor.h"
#include "lockstep/train/callbacks.h"
#include "lockstep/train/logs.h"
#include "lockstep/train/model.h"
#include "lockstep/train/progbar.h"
