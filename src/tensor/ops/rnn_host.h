// Internal: the recurrent ops' fused float32 host kernels (lstm_host.cc),
// which rnn_ops.cc runs where they apply and the composed form elsewhere.
#pragma once

#include <vector>

#include "lockstep/tensor/ops.h"

namespace lockstep::detail {

// Whether lstm(projected, ..., o) runs the fused host kernel: float32 on a
// device that runs host kernels, Keras's default activations (tanh, sigmoid),
// no recurrent dropout masks. Sequence masks, go_backwards, initial and
// returned states are the kernel's too.
bool lstm_runs_fused(const Tensor& projected, const RecurrentOptions& o);

// lstm on the host, checked by the caller (shapes, dtypes); `inputs` are
// what the op records (projected, kernel, then the initial states given).
Tensor lstm_fused(const Tensor& projected, const Tensor& kernel, const RecurrentOptions& o,
                  const std::vector<Tensor>& inputs);

}  // namespace lockstep::detail
