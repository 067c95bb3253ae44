// Tensors and optimizers to and from the RPC messages of comm/rpc.h.
#include "distribute/ps/wire.h"

#include <cstring>
#include <map>
#include <sstream>

#include "lockstep/core/error.h"

namespace lockstep::distribute::ps {

comm::rpc::WireTensor to_wire(const Tensor& t) {
  check_defined(t, "to_wire", "tensor");
  // Tensors are contiguous (views are row ranges): one copy, into the message.
  return {std::string(dtype_name(t.dtype())), t.shape().to_vector(),
          std::string(static_cast<const char*>(t.raw_data()), t.nbytes())};
}

comm::rpc::WireTensor rows_to_wire(const Tensor& t, std::int64_t begin, std::int64_t end) {
  return to_wire(t.rank() == 0 ? t : t.view_rows(begin, end));
}

Tensor from_wire(const comm::rpc::WireTensor& w, const std::string& what) {
  const DType dtype = dtype_from_name(w.dtype);
  for (std::int64_t d : w.shape)
    LOCKSTEP_CHECK(d >= 0 && d < (std::int64_t{1} << 40), what, ": a dimension of ", d);
  const Shape shape(w.shape);
  const std::size_t expected = static_cast<std::size_t>(shape.numel()) * dtype_size(dtype);
  LOCKSTEP_CHECK(w.bytes.size() == expected, what, ": ", w.bytes.size(), " bytes for a ",
                 w.dtype, " tensor of shape ", shape, " (expected ", expected, ")");
  Tensor t = Tensor::empty(shape, dtype);
  if (expected > 0) std::memcpy(t.raw_data(), w.bytes.data(), expected);
  return t;
}

comm::rpc::OptimizerSpec optimizer_spec(const OptimizerImpl& optimizer) {
  LOCKSTEP_CHECK(optimizer.learning_rate_schedule().name() == "constant",
                 "ParameterServerStrategy: the optimizer's learning rate follows the schedule ",
                 optimizer.learning_rate_schedule().name(),
                 "; on parameter servers only a constant learning rate is supported so far "
                 "(issue #20)");
  comm::rpc::OptimizerSpec spec{.class_name = optimizer.class_name(), .arguments = {}};
  for (const auto& [name, value] : optimizer.get_config()) {
    if (name == "clipnorm" || name == "clipvalue" || name == "global_clipnorm") continue;
    spec.arguments.emplace_back(name, value);
  }
  return spec;
}

Optimizer make_optimizer(const comm::rpc::OptimizerSpec& spec) {
  std::map<std::string, OptimizerArgument> args;
  for (const auto& [name, value] : spec.arguments) args[name] = value;
  return optimizers::from_config(spec.class_name, args);
}

std::string spec_key(const comm::rpc::OptimizerSpec& spec) {
  std::ostringstream key;
  key.precision(17);
  key << spec.class_name;
  for (const auto& [name, value] : spec.arguments) {
    key << ';' << name << '=';
    if (const bool* flag = std::get_if<bool>(&value)) {
      key << (*flag ? "true" : "false");
    } else {
      key << std::get<double>(value);
    }
  }
  return key.str();
}

}  // namespace lockstep::distribute::ps
