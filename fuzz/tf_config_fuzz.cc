// Fuzz target: TF_CONFIG text (ClusterResolver::from_tf_config).
#include <cstddef>
#include <cstdint>
#include <string>

#include "lockstep/core/error.h"
#include "lockstep/distribute/cluster_resolver.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto r = lockstep::distribute::ClusterResolver::from_tf_config(text);
    (void)r.canonical_cluster_spec();
  } catch (const lockstep::Error&) {
  }
  return 0;
}
