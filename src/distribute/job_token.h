// The rule every job token meets, wherever it comes from (an option, or
// LOCKSTEP_JOB_TOKEN): at least 16 bytes. The token keys the HMACs that
// admit a task to the chief's store and to the parameter servers; a one-
// byte token was accepted (issue #41), and 256 guesses would open the job.
// `lockstep launch` makes 32 random bytes; docs/distribute.md says
// `openssl rand -hex 32`. Where it comes from is one rule too: the
// strategy's option, else LOCKSTEP_JOB_TOKEN; without either, each strategy
// says what it does (a multi-worker job on loopback alone derives one, a
// parameter-server job refuses to start).
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "lockstep/core/env.h"
#include "lockstep/core/error.h"

namespace lockstep::distribute {

inline constexpr std::size_t kMinJobTokenBytes = 16;

// `token` itself, or a ValueError naming `who` and where the token came from.
inline const std::string& checked_job_token(const std::string& token, const std::string& who,
                                            const char* from) {
  LOCKSTEP_CHECK(token.size() >= kMinJobTokenBytes, who, ": the job token (", from, ") has ",
                 token.size(), " bytes; it must have at least ", kMinJobTokenBytes,
                 " (a secret as strong as `openssl rand -hex 32` makes)");
  return token;
}

// The option's token, else LOCKSTEP_JOB_TOKEN's (an empty one is unset),
// checked; nullopt when neither is given.
inline std::optional<std::string> given_job_token(const std::string& option,
                                                  const std::string& who) {
  if (!option.empty()) return checked_job_token(option, who, "job_token");
  if (auto token = env::job_token(); token && !token->empty())
    return checked_job_token(*token, who, "LOCKSTEP_JOB_TOKEN");
  return std::nullopt;
}

}  // namespace lockstep::distribute
