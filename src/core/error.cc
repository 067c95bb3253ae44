#include "lockstep/core/error.h"

namespace lockstep::detail {

void rethrow_with_prefix(const std::string& prefix) {
  try {
    throw;
  } catch (const IndexError& e) {
    throw IndexError(prefix + e.what());
  } catch (const ShapeError& e) {
    throw ShapeError(prefix + e.what());
  } catch (const ValueError& e) {
    throw ValueError(prefix + e.what());
  } catch (const TimeoutError& e) {
    throw TimeoutError(prefix + e.what());
  } catch (const DistributedError& e) {
    throw DistributedError(prefix + e.what());
  } catch (const IOError& e) {
    throw IOError(prefix + e.what());
  } catch (const InternalError& e) {
    throw InternalError(prefix + e.what());
  } catch (const Error& e) {
    throw Error(prefix + e.what());
  } catch (const std::exception& e) {
    throw Error(prefix + e.what());
  }
}

}  // namespace lockstep::detail
