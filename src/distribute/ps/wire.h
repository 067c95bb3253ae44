// Tensors and optimizers as the RPC messages carry them (comm/rpc.h), for
// the parameter-server side of distribute/ (ps/*.cc). Internal.
#pragma once

#include <string>

#include "lockstep/comm/rpc.h"
#include "lockstep/optim/optimizers.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep::distribute::ps {

// A contiguous copy of `t`'s elements.
comm::rpc::WireTensor to_wire(const Tensor& t);
// A tensor of the wire's dtype and shape; a dtype Lockstep does not know or
// a byte count that does not fit the shape is a ValueError naming `what`.
Tensor from_wire(const comm::rpc::WireTensor& w, const std::string& what);
// Rows [begin, end) of `t` (dim 0) as a wire tensor.
comm::rpc::WireTensor rows_to_wire(const Tensor& t, std::int64_t begin, std::int64_t end);

// The optimizer's class and Keras arguments, with clipping left out (the
// worker clips before it sends). A learning-rate schedule is refused: the
// parameter servers would each follow it at their own step.
comm::rpc::OptimizerSpec optimizer_spec(const OptimizerImpl& optimizer);
// The optimizer a spec names, and the key that tells two specs apart.
Optimizer make_optimizer(const comm::rpc::OptimizerSpec& spec);
std::string spec_key(const comm::rpc::OptimizerSpec& spec);

}  // namespace lockstep::distribute::ps
