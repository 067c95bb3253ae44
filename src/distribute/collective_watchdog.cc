// CollectiveWatchdog (collective_watchdog.h).
#include "collective_watchdog.h"

#include <iomanip>
#include <optional>
#include <sstream>

#include "lockstep/core/error.h"
#include "lockstep/core/log.h"

namespace lockstep::distribute {
namespace {

// "4.0 s", as the store's reasons say it.
template <typename Duration>
std::string seconds(Duration d) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << std::chrono::duration<double>(d).count() << " s";
  return os.str();
}

}  // namespace

CollectiveWatchdog::CollectiveWatchdog(std::vector<detail::DeviceCollective*> members,
                                       Options options)
    : members_(std::move(members)), options_(std::move(options)), thread_([this] { watch(); }) {}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
}

void CollectiveWatchdog::watch() {
  std::unique_lock lock(mutex_);
  while (!stop_cv_.wait_for(lock, options_.every, [&] { return stop_; })) {
    lock.unlock();
    const std::string why = verdict();
    if (!why.empty()) {
      // Said at once, whoever catches the replicas' errors.
      log(LogLevel::kWarning,
          detail::str_cat(options_.name, ": aborting the GPUs' NCCL sums: ", why, "\n"));
      // One abort ends every member's sums (they share one group); the
      // next run makes new communicators.
      members_.front()->abort(why);
      return;
    }
    lock.lock();
  }
}

std::string CollectiveWatchdog::verdict() {
  using Clock = detail::DeviceCollective::Clock;
  std::optional<Clock::time_point> oldest;
  for (detail::DeviceCollective* m : members_) {
    const auto since = m->waiting_since();
    if (since && (!oldest || *since < *oldest)) oldest = since;
  }
  if (!oldest) return {};
  const auto waited = Clock::now() - *oldest;
  if (waited < options_.every) return {};  // a healthy sum takes milliseconds
  if (options_.lost) {
    std::string lost;
    try {
      lost = options_.lost();
    } catch (const Error&) {  // the chief out of reach: left to the deadline
    }
    if (!lost.empty()) return detail::str_cat(lost, "; the sum had waited ", seconds(waited));
  }
  if (waited < options_.deadline) return {};
  std::string diagnosis;
  if (options_.diagnose) {
    try {
      diagnosis = options_.diagnose();
    } catch (const Error&) {
    }
  }
  return detail::str_cat("the sum did not complete within ", seconds(options_.deadline),
                         " (the strategy's collective timeout)",
                         diagnosis.empty() ? "" : "; " + diagnosis);
}

}  // namespace lockstep::distribute
