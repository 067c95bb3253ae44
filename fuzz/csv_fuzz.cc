// Fuzz target: CSV files through csv_dataset (a header, three typed columns,
// one with a default), every element read.
#include "fuzz_file.h"
#include "lockstep/data/readers.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return lockstep::fuzz::run_on_file("input.csv", data, size, [](const std::string& p) {
    namespace ld = lockstep::data;
    const ld::Dataset ds =
        ld::csv_dataset({p}, {.columns = {{lockstep::DType::kFloat32, 0.0},
                                          {lockstep::DType::kInt32, std::nullopt},
                                          {lockstep::DType::kInt64, -1.0}},
                              .header = true});
    for (const ld::Element& e : ds) (void)e;
  });
}
