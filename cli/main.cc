// The `lockstep` command line. Library errors become exit codes here and
// nowhere else.
//
//   lockstep devices     lists the logical CPU devices and their cores
//   lockstep version     prints the version
//
// `train`, `evaluate`, `predict` and `inspect` arrive with the issues that
// build models, strategies and checkpoints (#3, #5, #6).
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "lockstep/lockstep.h"

namespace {

int devices() {
  for (const lockstep::Device* d : lockstep::logical_devices()) {
    std::string cores;
    for (int c : d->cores()) {
      if (!cores.empty()) cores += ',';
      cores += std::to_string(c);
    }
    std::printf("%s  cores=%s  threads=%d\n", d->name().c_str(), cores.c_str(), d->num_threads());
  }
  return 0;
}

int usage(FILE* out) {
  std::fprintf(
      out,
      "usage: lockstep <command>\n"
      "commands:\n"
      "  devices   list the logical CPU devices (set LOCKSTEP_CPU_DEVICES to change them)\n"
      "  version   print the version\n");
  return out == stdout ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 2) return usage(stderr);
    const std::string command = argv[1];
    if (command == "devices") return devices();
    if (command == "version") {
      std::printf("lockstep 0.1.0\n");
      return 0;
    }
    if (command == "-h" || command == "--help" || command == "help") return usage(stdout);
    std::fprintf(stderr, "lockstep: unknown command '%s'\n", command.c_str());
    return usage(stderr);
  } catch (const lockstep::Error& e) {
    std::fprintf(stderr, "lockstep: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lockstep: internal error: %s\n", e.what());
    return 3;
  }
}
