// Fuzz target: CSV files through read_csv_table (the `lockstep train --data
// FILE.csv` reader: parts on all cores, the one-load number path that reads
// past a field), with and without a missing-value marker, every value read.
#include <cmath>

#include "fuzz_file.h"
#include "lockstep/data/csv_table.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return lockstep::fuzz::run_on_file("input.csv", data, size, [](const std::string& p) {
    namespace ld = lockstep::data;
    for (const std::string marker : {"", "NA"}) {
      const ld::CsvTable t = ld::read_csv_table(p, {.na_value = marker});
      std::size_t seen = 0;
      for (const ld::CsvTable::Column& c : t.columns) {
        for (double v : c.numbers) seen += std::isnan(v) ? 1 : 0;
        for (std::string_view s : c.text) seen += s.size();
      }
      if (seen == static_cast<std::size_t>(-1)) __builtin_trap();  // keeps the reads
    }
  });
}
