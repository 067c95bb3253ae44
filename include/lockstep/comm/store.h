// The rendezvous store of a multi-worker job: a small key-value store that the
// chief serves at its cluster address, through which the workers find each
// other (Gloo's connectFullMesh reads and writes its addresses here) and the
// chief learns which worker is alive.
//
// Wire protocol (one TCP connection per client):
//   server -> client: "LSTORE1\0" and a 32-byte random nonce
//   client -> server: HMAC-SHA256(job token, nonce), 32 bytes
//   server -> client: 1 byte, 1 = accepted (else the connection is closed)
//   then frames both ways: u32 little-endian length + body, at most
//   max_frame_bytes (a larger length closes the connection).
// Nothing a client sends is parsed before its HMAC has been checked, every
// read has a deadline, and the server binds only the address it is given —
// a stranger who reaches the port can neither join the job nor crash it.
//
// Liveness: every worker keeps one more connection open on which it sends a
// heartbeat byte every heartbeat_interval. The server marks a worker lost
// when that connection closes (its process ended) or stays silent for
// heartbeat_timeout (its host or link went away); lost_workers() tells who
// and why, so that a failed collective can name the worker it lost.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lockstep::comm {

struct StoreOptions {
  std::string host = "127.0.0.1";  // the chief's address from the cluster spec
  int port = 0;                    // 0 (server only): any free port
  std::string token{};             // the job's shared secret (never sent)
  // Deadline for connecting (the chief may start after the workers), for
  // every read, and for get()/wait() of keys that are not there yet.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  std::size_t max_frame_bytes = std::size_t{16} << 20;
  // Server: keys and values held in all; a set past it is refused.
  std::size_t max_total_bytes = std::size_t{256} << 20;
  std::chrono::milliseconds heartbeat_interval{500};
  std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(5)};
};

struct LostWorker {
  int rank = -1;
  std::string reason{};  // "its connection closed", "no heartbeat for 5.0 s"
  // It said goodbye: its process ended on its own (done, or stopped on an
  // error its log names), not lost. Said after a failed collective; never
  // a reason to abort one (at a job's end every worker leaves).
  bool left = false;
};

class StoreServer {
 public:
  // Binds options.host:options.port (IOError naming the address when it
  // cannot) and serves on background threads until destroyed.
  static std::unique_ptr<StoreServer> start(const StoreOptions& options);
  virtual ~StoreServer() = default;
  virtual int port() const = 0;
  virtual std::vector<LostWorker> lost_workers() const = 0;
  // Connections closed without being served to their end, each counted
  // once: a handshake that failed (a wrong HMAC, none before the deadline,
  // evicted to make room), a bad frame, or one over the connection cap.
  virtual std::int64_t rejected_connections() const = 0;
};

class StoreClient {
 public:
  // Connects (retrying until options.timeout: the server may not be up yet)
  // and authenticates. TimeoutError names the address when it cannot.
  static std::unique_ptr<StoreClient> connect(const StoreOptions& options);
  virtual ~StoreClient() = default;

  virtual void set(const std::string& key, const std::vector<char>& value) = 0;
  // Waits (up to the timeout) until the key exists.
  virtual std::vector<char> get(const std::string& key) = 0;
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // Adds delta to a counter (created at 0) and returns its new value.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;

  // Opens the liveness connection for `rank` and sends heartbeats from a
  // background thread until the client is destroyed (a clean goodbye: the
  // server does not count the worker as lost).
  virtual void start_heartbeat(int rank) = 0;
  // Asks the server which workers it has lost (on a fresh connection with a
  // short deadline; throws DistributedError when the server cannot be reached).
  virtual std::vector<LostWorker> lost_workers() = 0;
};

// HMAC-SHA256(key, data), for the handshake and its tests.
std::vector<unsigned char> hmac_sha256(const std::string& key, const unsigned char* data,
                                       std::size_t size);

}  // namespace lockstep::comm
