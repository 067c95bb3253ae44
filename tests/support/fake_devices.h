// Two devices of the fake accelerator for a test binary, made on first use
// (set_fake_devices accepts the same count again from another test file).
#pragma once

#include <vector>

#include "lockstep/tensor/device.h"

namespace lockstep::testing_support {

inline const std::vector<Device*>& two_fake_devices() {
  static const bool made = [] {
    set_fake_devices(2);
    return true;
  }();
  (void)made;
  return fake_devices();
}

}  // namespace lockstep::testing_support
