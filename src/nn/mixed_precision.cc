// Dtype policies by Keras's names, and the process-wide global policy that
// layers take when they are constructed.
#include "lockstep/nn/mixed_precision.h"

#include <mutex>

#include "lockstep/core/error.h"

namespace lockstep {

DTypePolicy DTypePolicy::from_name(const std::string& name) {
  if (name == "float32") return {"float32", DType::kFloat32, DType::kFloat32};
  if (name == "mixed_bfloat16") return {"mixed_bfloat16", DType::kBFloat16, DType::kFloat32};
  if (name == "mixed_float16") return {"mixed_float16", DType::kFloat16, DType::kFloat32};
  if (name == "bfloat16" || name == "float16") {
    detail::throw_error<ValueError>(
        "dtype policy '", name, "' keeps the variables in ", name,
        ", and Lockstep's optimizers update float32 variables only. Hint: use 'mixed_", name, "' (",
        name, " compute, float32 variables)");
  }
  detail::throw_error<ValueError>("unknown dtype policy '", name,
                                  "'; valid policies: float32, mixed_bfloat16, mixed_float16");
}

namespace mixed_precision {
namespace {

std::mutex& policy_mutex() {
  static std::mutex m;
  return m;
}

DTypePolicy& global() {
  static DTypePolicy policy;
  return policy;
}

}  // namespace

void set_global_policy(const std::string& name) { set_global_policy(DTypePolicy::from_name(name)); }

void set_global_policy(const DTypePolicy& policy) {
  const DTypePolicy checked = DTypePolicy::from_name(policy.name);  // refuses what it must
  std::lock_guard lock(policy_mutex());
  global() = checked;
}

DTypePolicy global_policy() {
  std::lock_guard lock(policy_mutex());
  return global();
}

}  // namespace mixed_precision
}  // namespace lockstep
