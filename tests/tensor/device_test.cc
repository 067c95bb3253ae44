// Logical devices: the LOCKSTEP_CPU_DEVICES syntax, validation, DeviceScope.
#include <gtest/gtest.h>
#include <omp.h>

#include "lockstep/lockstep.h"

namespace lockstep {
namespace {

TEST(Devices, ParseCountSplitsCoresContiguously) {
  const std::vector<int> cores{0, 1, 2, 3};
  EXPECT_EQ(parse_cpu_devices("2", cores), (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(parse_cpu_devices("1", cores), (std::vector<std::vector<int>>{{0, 1, 2, 3}}));
  // More devices than cores: replica threads share cores, one core each.
  EXPECT_EQ(parse_cpu_devices("3", {0, 1}), (std::vector<std::vector<int>>{{0}, {1}, {0}}));
}

TEST(Devices, ParseExplicitCoreLists) {
  EXPECT_EQ(parse_cpu_devices("0,1;2-3", {0, 1, 2, 3}),
            (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(parse_cpu_devices("1;0", {0, 1}), (std::vector<std::vector<int>>{{1}, {0}}));
}

TEST(Devices, ParseErrorsQuoteTheSpec) {
  for (const char* bad : {"0", "x", "0,a;1", "3-1"}) {
    try {
      parse_cpu_devices(bad, {0, 1});
      ADD_FAILURE() << bad;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("LOCKSTEP_CPU_DEVICES"), std::string::npos) << e.what();
    }
  }
}

TEST(Devices, SetLogicalDevicesRejectsMissingAndOverlappingCores) {
  try {
    set_logical_cpu_devices({{0}, {0}});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("core 0 is in device 0 and device 1"), std::string::npos)
        << e.what();
  }
  try {
    set_logical_cpu_devices({{100000}});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("core 100000"), std::string::npos) << e.what();
  }
  EXPECT_THROW(set_logical_cpu_devices({}), ValueError);
}

TEST(Devices, DefaultIsOneDevicePerPhysicalCoreAndFreezes) {
  const auto& devices = logical_devices();
  ASSERT_EQ(devices.size(), available_physical_cores().size());
  for (std::size_t i = 0; i < devices.size(); ++i) {
    EXPECT_EQ(devices[i]->index(), static_cast<int>(i));
    EXPECT_EQ(devices[i]->cores().size(), 1u);
    EXPECT_EQ(devices[i]->name(), "/device:CPU:" + std::to_string(i));
  }
  EXPECT_THROW(set_logical_cpu_devices({{available_physical_cores()[0]}}), ValueError);
}

TEST(Devices, ScopeSetsCurrentDeviceThreadsAndRestores) {
  Device& host = host_device();
  EXPECT_EQ(&current_device(), &host);
  const int threads_before = omp_get_max_threads();
  Device& d0 = *logical_devices()[0];
  {
    DeviceScope scope(d0);
    EXPECT_EQ(&current_device(), &d0);
    EXPECT_EQ(omp_get_max_threads(), d0.num_threads());
    const Tensor t = Tensor::zeros({4});
    EXPECT_EQ(&t.device(), &d0);  // tensors come from the current device's pool
  }
  EXPECT_EQ(&current_device(), &host);
  EXPECT_EQ(omp_get_max_threads(), threads_before);
}

}  // namespace
}  // namespace lockstep
