// Workers of a multi-worker job that share a host split its cores among
// themselves (internal; see host_cores.cc).
#pragma once

#include "lockstep/comm/communicator.h"
#include "lockstep/distribute/cluster_resolver.h"

namespace lockstep::distribute {

// Collective over `workers` (every worker calls it once, after joining).
// When several workers run on this host and the cores they may use overlap,
// confines this one to its share — the host's cores cut in contiguous,
// disjoint parts by its rank among them, as `lockstep launch` pins them —
// and says so in one line (an info, core/log.h). Nothing changes when LOCKSTEP_CPU_DEVICES
// (or set_logical_cpu_devices) chose the devices, or LOCKSTEP_PIN_WORKERS=0.
void split_host_cores(comm::Communicator& workers, const ClusterResolver& resolver);

}  // namespace lockstep::distribute
