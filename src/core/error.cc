#include "lockstep/core/error.h"

#include <string_view>

namespace lockstep::detail {

const char* error_class_name(const std::exception& e) {
  // Most derived first.
  if (dynamic_cast<const IndexError*>(&e)) return "IndexError";
  if (dynamic_cast<const ShapeError*>(&e)) return "ShapeError";
  if (dynamic_cast<const ValueError*>(&e)) return "ValueError";
  if (dynamic_cast<const TimeoutError*>(&e)) return "TimeoutError";
  if (dynamic_cast<const UnavailableError*>(&e)) return "UnavailableError";
  if (dynamic_cast<const CancelledError*>(&e)) return "CancelledError";
  if (dynamic_cast<const RejoinError*>(&e)) return "RejoinError";
  if (dynamic_cast<const DistributedError*>(&e)) return "DistributedError";
  if (dynamic_cast<const IOError*>(&e)) return "IOError";
  if (dynamic_cast<const DeviceError*>(&e)) return "DeviceError";
  if (dynamic_cast<const InternalError*>(&e)) return "InternalError";
  return "Error";
}

void throw_error_of_class(const std::string& name, const std::string& message) {
  if (name == "IndexError") throw IndexError(message);
  if (name == "ShapeError") throw ShapeError(message);
  if (name == "ValueError") throw ValueError(message);
  if (name == "TimeoutError") throw TimeoutError(message);
  if (name == "UnavailableError") throw UnavailableError(message);
  if (name == "CancelledError") throw CancelledError(message);
  if (name == "RejoinError") throw RejoinError(message);
  if (name == "DistributedError") throw DistributedError(message);
  if (name == "IOError") throw IOError(message);
  if (name == "DeviceError") throw DeviceError(message);
  if (name == "InternalError") throw InternalError(message);
  throw Error(message);
}

void rethrow_with_prefix(const std::string& prefix) {
  try {
    throw;
  } catch (const std::exception& e) {
    throw_error_of_class(error_class_name(e), prefix + e.what());
  }
}

void rethrow_naming(const std::string& source) {
  try {
    throw;
  } catch (const std::exception& e) {
    if (std::string_view(e.what()).starts_with(source)) throw;
    throw_error_of_class(error_class_name(e), source + ": " + e.what());
  }
}

}  // namespace lockstep::detail
