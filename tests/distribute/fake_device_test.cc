// The fake accelerator: the GPU's rules on host memory, on every push
// (docs/distribute.md, "GPUs"). Host code that reaches for device memory
// fails; ops run there through the device path; the seed MLP trains on two
// fake devices under MirroredStrategy exactly as on two CPU replicas.
#include <gtest/gtest.h>

#include "lockstep/lockstep.h"
#include "lockstep/tensor/device_kernels.h"
#include "support/fake_devices.h"

namespace lockstep {
namespace {

using testing_support::two_fake_devices;

TEST(FakeDevice, NamesParseAsTensorFlowsAndOurs) {
  ASSERT_EQ(two_fake_devices().size(), 2u);
  EXPECT_EQ(&device("/device:FAKE:1"), two_fake_devices()[1]);
  EXPECT_EQ(&device("fake:0"), two_fake_devices()[0]);
  EXPECT_EQ(&device("/job:localhost/replica:0/task:0/device:CPU:0"), logical_devices()[0]);
  EXPECT_EQ(&device("/cpu:0"), logical_devices()[0]);
  EXPECT_EQ(two_fake_devices()[1]->name(), "/device:FAKE:1");
  EXPECT_THROW(device("/device:TPU:0"), ValueError);
  EXPECT_THROW(device("/device:FAKE:2"), DeviceError);
}

TEST(FakeDevice, HostCodeCannotTouchItsMemory) {
  DeviceScope on(*two_fake_devices()[0]);
  const Tensor t = Tensor::from_vector<float>({1, 2, 3});
  EXPECT_EQ(&t.device(), two_fake_devices()[0]);
  try {
    (void)t.data<float>();
    FAIL() << "data() on a fake device's tensor returned";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("/device:FAKE:0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(".cpu()"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)t.raw_data(), DeviceError);
  // Explicit copies and the reading APIs work.
  EXPECT_EQ(t.cpu().data<float>()[2], 3.0f);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(sum(t).item<float>(), 6.0f);
}

TEST(FakeDevice, OpsOnTheDeviceEqualTheCpu) {
  const Tensor a = random::uniform({5, 7}, {.seed = 1});
  const Tensor b = random::uniform({7, 3}, {.seed = 2});
  const Tensor bias = random::uniform({3}, {.seed = 3});
  const Tensor want = log_softmax(relu(sub(matmul(a, b, bias), Tensor::scalar(0.5f))), -1);
  Tensor got;
  {
    DeviceScope on(*two_fake_devices()[1]);
    got = log_softmax(relu(sub(matmul(a, b, bias), Tensor::scalar(0.5f))), -1);
    EXPECT_EQ(&got.device(), two_fake_devices()[1]);
  }
  EXPECT_EQ(got.to_vector<float>(), want.to_vector<float>());
  // An op on the CPU given a fake device's tensor: an error, not a read.
  EXPECT_THROW(add(got, got), DeviceError);
}

}  // namespace
}  // namespace lockstep
