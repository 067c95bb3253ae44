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
#include "lockstep/tensor/device.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/random.h"
#include "lockstep/tensor/tensor.h"
