// Fuzz target: Keras's model config JSON (the config.json of a .keras file,
// model_from_json): the graph, the layers and their settings. Models a
// config declares are built, so layer sizes are capped: a config may ask
// for any model, and a large one is not a bug; past the cap the input is
// skipped, not run.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_file.h"
#include "lockstep/core/checked.h"
#include "lockstep/core/error.h"
#include "lockstep/train/model.h"

namespace {

// Whether every number in the config is small enough that the model it
// declares stays within the fuzzer's memory limit (64 units, shapes of 64).
bool small(const nlohmann::json& j) {
  if (j.is_number_integer()) return j.get<std::int64_t>() >= -64 && j.get<std::int64_t>() <= 64;
  if (j.is_number_unsigned()) return j.get<std::uint64_t>() <= 64;
  if (!j.is_structured()) return true;
  for (const auto& e : j) {
    if (!small(e)) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    lockstep::check_json_nesting(text, "config.json");  // small() below recurses
  } catch (const lockstep::Error&) {
    return 0;
  }
  const nlohmann::json parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !small(parsed)) return 0;
  lockstep::Model m;
  try {
    m = lockstep::model_from_json(text, "config.json");
  } catch (const lockstep::Error& e) {
    lockstep::fuzz::names_source(e, "config.json");
    return 0;
  }
  try {
    (void)m.to_json();
  } catch (const lockstep::Error&) {
  }
  return 0;
}
