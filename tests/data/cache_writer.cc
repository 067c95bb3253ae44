// Helper for cache_process_test: iterates range(n) mapped to 256-float rows
// through cache(path), sleeping `delay_us` per element, and checks each value.
// Exit 0 and "ok <n>" on success.
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "lockstep/data/dataset.h"

int main(int argc, char** argv) {
  namespace ld = lockstep::data;
  if (argc != 4) {
    std::cerr << "usage: cache_writer PATH N DELAY_US\n";
    return 2;
  }
  const std::string path = argv[1];
  const std::int64_t n = std::atoll(argv[2]);
  const int delay_us = std::atoi(argv[3]);
  try {
    auto ds = ld::Dataset::range(n)
                  .map([delay_us](const ld::Element& e) {
                    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
                    const auto v = static_cast<float>(e[0].item<std::int64_t>());
                    return ld::Element{lockstep::Tensor::full({256}, v)};
                  })
                  .cache(path);
    std::int64_t i = 0;
    for (const auto& e : ds) {
      const auto values = e[0].to_vector<float>();
      if (values.size() != 256 || values.front() != static_cast<float>(i) ||
          values.back() != static_cast<float>(i)) {
        std::cerr << "element " << i << " is wrong\n";
        return 1;
      }
      ++i;
    }
    if (i != n) {
      std::cerr << "got " << i << " elements, expected " << n << "\n";
      return 1;
    }
    std::cout << "ok " << i << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}
