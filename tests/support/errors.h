// Errors in tests: the message a call throws, to check that it names what
// it should (the file, the path, expected and found).
#pragma once

#include <gtest/gtest.h>

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

// Expects `f` to throw an E whose message contains `part`.
template <typename E>
void expect_error_containing(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing: " << part;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

}  // namespace lockstep::testing_support
