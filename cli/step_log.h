// `lockstep train --step-log FILE`: one line per training step, appended,
// so that a restarted or shrunk job can be compared with an uninterrupted
// one step by step (issue #40: no step trained twice into the weights,
// none skipped). See step_log.cc.
#pragma once

#include <memory>
#include <string>

#include "lockstep/lockstep.h"

namespace lockstep::cli {

// "epoch,step,loss": the epoch (from 1, as the progress lines count), the
// optimizer's step after the batch (counting on across epochs and
// restarts), and the batch's logged loss (the epoch's running mean, as
// Keras's batch logs) to 17 significant digits, so that equal lines mean
// bitwise equal losses. The header is written when the file is new or
// empty; each line is flushed as it is written, so a killed run loses none.
// An unwritable file is an IOError at construction, before training.
std::shared_ptr<Callback> step_log(const std::string& path);

}  // namespace lockstep::cli
