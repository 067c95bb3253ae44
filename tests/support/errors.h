// Errors in tests: the message a call throws, to check that it names what
// it should (the file, the path, expected and found).
#pragma once

#include <exception>
#include <functional>
#include <string>

namespace lockstep::testing_support {

// What `f` threw, or "(no error)".
inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace lockstep::testing_support
