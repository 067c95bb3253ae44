// Dtype policies and mixed precision, as keras.DTypePolicy and
// keras.mixed_precision:
//
//   ls::mixed_precision::set_global_policy("mixed_bfloat16");
//   auto x = ls::layers::Dense(256, {.activation = "relu"})(inputs);   // bfloat16 compute
//   auto out = ls::layers::Dense(10, {.dtype = "float32"})(x);          // float32 head
//
// A policy names a layer's compute dtype (what its inputs are cast to and
// its ops run in) and its variable dtype (what its weights are stored and
// updated in). Under "mixed_bfloat16" variables, optimizer slots and
// updates stay float32; a layer reads its weights cast to bfloat16 (Keras's
// autocast) and the cast's gradient brings float32 gradients back to them.
// BatchNormalization keeps its statistics in float32, softmax returns
// float32, and a Model's outputs are cast to float32 before losses and
// metrics, so losses and metrics are float32 too.
//
// Layers take the global policy when they are constructed (Keras's rule), or
// their own `dtype` option. Policies Lockstep refuses, each with the reason:
// "mixed_float16" and "float16" (float16 pays off on GPUs; on a CPU use
// mixed_bfloat16, as Keras's guide says), "bfloat16" (variables in bfloat16,
// which the optimizers do not update).
//
// Speed: on a CPU with bfloat16 instructions (avx512_bf16 or AMX) matmul,
// convolution and pooling run oneDNN's native bfloat16 kernels and a step
// runs 1.4-1.7x float32's (docs/benchmarks.md); without them (AVX2) those
// ops are emulated in float32 and mixed_bfloat16 is slower than float32.
// lockstep::bfloat16_kernels() (tensor/ops.h) says which, and the first
// layer that computes in bfloat16 warns once when it is emulated
// (docs/models.md, "Mixed precision").
#pragma once

#include <string>

#include "lockstep/core/dtype.h"

namespace lockstep {

struct DTypePolicy {
  std::string name = "float32";
  DType compute_dtype = DType::kFloat32;
  DType variable_dtype = DType::kFloat32;

  // Keras's names: "float32", "mixed_bfloat16"; the refused ones throw a
  // ValueError saying why, unknown ones list the valid names.
  static DTypePolicy from_name(const std::string& name);
  bool operator==(const DTypePolicy& other) const { return name == other.name; }
};

namespace mixed_precision {

void set_global_policy(const std::string& name);
void set_global_policy(const DTypePolicy& policy);
DTypePolicy global_policy();

}  // namespace mixed_precision
}  // namespace lockstep
