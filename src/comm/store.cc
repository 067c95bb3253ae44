// The rendezvous store: server (on the chief) and client (on every worker).
// See include/lockstep/comm/store.h for the protocol.
#include "lockstep/comm/store.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <iomanip>
#include <list>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "lockstep/core/error.h"
#include "lockstep/core/log.h"
#include "socket.h"

namespace lockstep::comm {

using detail::Clock;
using detail::Socket;

std::vector<unsigned char> hmac_sha256(const std::string& key, const unsigned char* data,
                                       std::size_t size) {
  std::vector<unsigned char> out(EVP_MAX_MD_SIZE);
  unsigned int len = 0;
  const unsigned char* ok =
      HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), data, size, out.data(), &len);
  LOCKSTEP_CHECK_AS(InternalError, ok != nullptr, "HMAC-SHA256 failed");
  out.resize(len);
  return out;
}

namespace {

constexpr char kMagic[8] = {'L', 'S', 'T', 'O', 'R', 'E', '1', '\0'};
constexpr std::size_t kNonceBytes = 32;
constexpr std::size_t kMacBytes = 32;

enum Op : char {
  kSet = 'S',
  kGet = 'G',
  kWait = 'W',
  kAdd = 'A',
  kHeartbeat = 'H',
  kLost = 'L',
};
constexpr char kBeat = 'h';
constexpr char kBye = 'b';

// Bounds-checked reading of a frame body; any overrun marks it bad.
class Reader {
 public:
  Reader(const std::vector<char>& b) : p_(b.data()), left_(b.size()) {}
  bool ok() const { return ok_; }
  bool done() const { return left_ == 0; }
  template <typename T>
  T pod() {
    T v{};
    if (left_ < sizeof(T)) {
      ok_ = false;
      return v;
    }
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    left_ -= sizeof(T);
    return v;
  }
  std::string str() {
    const auto n = pod<std::uint32_t>();
    if (!ok_ || left_ < n) {
      ok_ = false;
      return {};
    }
    std::string s(p_, n);
    p_ += n;
    left_ -= n;
    return s;
  }

 private:
  const char* p_;
  std::size_t left_;
  bool ok_ = true;
};

class Writer {
 public:
  template <typename T>
  Writer& pod(T v) {
    const auto* p = reinterpret_cast<const char*>(&v);
    b_.insert(b_.end(), p, p + sizeof(T));
    return *this;
  }
  Writer& str(const std::string& s) {
    pod(static_cast<std::uint32_t>(s.size()));
    b_.insert(b_.end(), s.begin(), s.end());
    return *this;
  }
  Writer& bytes(const std::vector<char>& v) {
    pod(static_cast<std::uint32_t>(v.size()));
    b_.insert(b_.end(), v.begin(), v.end());
    return *this;
  }
  std::vector<char>& body() { return b_; }

 private:
  std::vector<char> b_;
};

bool send_frame(const Socket& s, const std::vector<char>& body, Clock::time_point deadline,
                std::string& why) {
  const auto n = static_cast<std::uint32_t>(body.size());
  return detail::write_all(s, &n, sizeof n, deadline, why) &&
         detail::write_all(s, body.data(), body.size(), deadline, why);
}

bool recv_frame(const Socket& s, std::vector<char>& body, std::size_t max_bytes,
                Clock::time_point deadline, std::string& why) {
  std::uint32_t n = 0;
  if (!detail::read_exact(s, &n, sizeof n, deadline, why)) return false;
  if (n == 0 || n > max_bytes) {
    why = lockstep::detail::str_cat("a frame of ", n, " bytes (at most ", max_bytes, ")");
    return false;
  }
  body.resize(n);
  return detail::read_exact(s, body.data(), n, deadline, why);
}

std::string seconds(std::chrono::milliseconds ms) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << static_cast<double>(ms.count()) / 1000.0 << " s";
  return os.str();
}

// ---------------------------------------------------------------- server

class StoreServerImpl final : public StoreServer {
 public:
  explicit StoreServerImpl(const StoreOptions& o) : o_(o) {
    LOCKSTEP_CHECK(!o.token.empty(), "StoreServer: the job token is empty");
    detail::raise_open_file_limit();
    // Handshakes in progress at once: a worker's takes milliseconds, and a
    // quarter of the file descriptors at most, so that strangers never leave
    // the process (its Gloo mesh, its files) without any.
    rlimit files{};
    if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY)
      max_unauthenticated_ = std::clamp<std::size_t>(files.rlim_cur / 4, 4, 64);
    listener_ = detail::listen_on(o.host, o.port);
    port_ = detail::local_port(listener_);
    accept_thread_ = std::thread([this] { accept_loop(); });
  }

  ~StoreServerImpl() override {
    {
      std::unique_lock lk(mu_);
      // A chief that lost a worker stays, up to a heartbeat timeout, until
      // the others have heard it from here (each asks once a heartbeat
      // interval) and left: gone at once, it left them to their
      // collective's deadline and a report that blamed the chief alone.
      if (!lost_.empty()) cv_.wait_for(lk, o_.heartbeat_timeout, [&] { return watching_ == 0; });
      stop_ = true;
      for (auto& c : connections_) c->socket.shutdown();
    }
    cv_.notify_all();
    listener_.shutdown();
    accept_thread_.join();
    // Nothing adds connections now; each thread only marks its own done.
    for (auto& c : connections_) c->thread.join();
  }

  int port() const override { return port_; }

  std::vector<LostWorker> lost_workers() const override {
    std::lock_guard lk(mu_);
    std::vector<LostWorker> out;
    for (const auto& [rank, lw] : lost_) out.push_back(lw);
    for (const auto& [rank, lw] : left_)
      if (!lost_.count(rank)) out.push_back(lw);
    return out;
  }

  std::int64_t rejected_connections() const override { return rejected_.load(); }

 private:
  struct Connection;
  // The store must keep accepting whatever a stranger does: one accept()
  // error used to end this loop for good, so 300 idle connections under
  // `ulimit -n 256` kept every worker out. Now a failed accept (out of file
  // descriptors: EMFILE, ENFILE; or of memory) closes the oldest connection
  // still in its handshake, backs off and goes on, and the cause is said
  // once. Connections that have not authenticated are capped at
  // max_unauthenticated_ (the oldest goes first) and have a handshake
  // deadline (authenticate()), so workers always find room.
  void accept_loop() {
    bool said = false;
    for (;;) {
      int error = 0;
      Socket s = detail::accept_from(listener_, error);
      std::unique_lock lk(mu_);
      if (stop_) return;
      reap_locked();
      if (!s.valid()) {
        if (error == 0) return;  // the listener was shut down
        if (!said) {
          said = true;
          log(LogLevel::kWarning, lockstep::detail::str_cat(
                                      "StoreServer: cannot accept a connection (",
                                      std::strerror(error), ") with ", connections_.size(),
                                      " open; closing connections that have not authenticated and "
                                      "going on\n"));
        }
        evict_oldest_unauthenticated_locked();
        lk.unlock();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
      if (connections_.size() >= kMaxConnections) {
        ++rejected_;
        continue;  // `s` closes here
      }
      std::size_t unauthenticated = 0;
      for (const auto& c : connections_) unauthenticated += !c->authenticated;
      if (unauthenticated >= max_unauthenticated_) evict_oldest_unauthenticated_locked();
      auto conn = std::make_unique<Connection>();
      conn->socket = std::move(s);
      Connection* c = conn.get();
      c->thread = std::thread([this, c] {
        serve(*c);
        // OpenSSL's per-thread state (the nonce's RAND_bytes), freed now
        // rather than at process exit: a store serves thousands of short
        // connections, each on its own thread.
        OPENSSL_thread_stop();
        std::lock_guard done(mu_);
        c->socket.close();
        c->done = true;
      });
      connections_.push_back(std::move(conn));
    }
  }

  // Finished connections give back their thread and socket, so a stranger
  // who connects again and again costs nothing lasting.
  void reap_locked() {
    for (auto it = connections_.begin(); it != connections_.end();) {
      if ((*it)->done) {
        (*it)->thread.join();
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Ends the handshake of the oldest connection that has not authenticated
  // (its thread sees the socket shut and finishes; reap_locked frees it).
  void evict_oldest_unauthenticated_locked() {
    for (auto& c : connections_) {
      if (!c->authenticated && !c->done && !c->evicted) {
        c->evicted = true;
        c->socket.shutdown();  // counted as rejected by its serve()
        return;
      }
    }
  }

  // Says at once, on the chief, that a peer failed the handshake — a worker
  // with the wrong token would otherwise be reported only as "did not join"
  // at the end of the join timeout. The peer learns nothing but the closed
  // connection. At most kAuthFailuresSaid lines, then a count.
  void say_auth_failure(const Socket& s, const char* how) {
    const std::int64_t n = ++auth_failures_;
    if (n > kAuthFailuresSaid) return;
    log(LogLevel::kWarning,
        lockstep::detail::str_cat(
            "StoreServer: a connection from ", detail::peer_address(s), " failed authentication (",
            how, "); closed",
            n == kAuthFailuresSaid ? " (further failures are counted, not said)" : "", "\n"));
  }

  bool authenticate(const Socket& s) {
    std::array<unsigned char, kNonceBytes> nonce{};
    LOCKSTEP_CHECK_AS(InternalError, RAND_bytes(nonce.data(), kNonceBytes) == 1,
                      "RAND_bytes failed");
    std::string why;
    const auto deadline = Clock::now() + std::min(o_.timeout, std::chrono::milliseconds(10000));
    if (!detail::write_all(s, kMagic, sizeof kMagic, deadline, why) ||
        !detail::write_all(s, nonce.data(), nonce.size(), deadline, why))
      return false;
    std::array<unsigned char, kMacBytes> mac{};
    if (!detail::read_exact(s, mac.data(), mac.size(), deadline, why)) return false;
    const auto expected = hmac_sha256(o_.token, nonce.data(), nonce.size());
    if (CRYPTO_memcmp(expected.data(), mac.data(), kMacBytes) != 0) {
      say_auth_failure(s, "a wrong job token: LOCKSTEP_JOB_TOKEN must be the same on every worker");
      return false;
    }
    const char accepted = 1;
    return detail::write_all(s, &accepted, 1, deadline, why);
  }

  void serve(Connection& c) {
    const Socket& s = c.socket;
    // A connection is rejected once, however its handshake ended: a wrong
    // MAC, none before the deadline, or evicted to make room.
    if (!authenticate(s)) {
      ++rejected_;
      return;
    }
    {
      std::lock_guard lk(mu_);
      c.authenticated = true;
    }
    std::vector<char> body;
    std::string why;
    for (;;) {
      if (!recv_frame(s, body, o_.max_frame_bytes, Clock::now() + o_.timeout, why)) {
        if (why.rfind("a frame of", 0) == 0) ++rejected_;
        return;
      }
      Reader r(body);
      const char op = r.pod<char>();
      if (op == kHeartbeat) {
        const auto rank = r.pod<std::int32_t>();
        if (!r.ok() || !r.done()) break;
        watch(s, rank);
        return;
      }
      Writer w;
      if (!handle(op, r, w) || !r.ok() || !r.done()) break;
      if (!send_frame(s, w.body(), Clock::now() + o_.timeout, why)) return;
    }
    ++rejected_;  // a malformed request: close the connection, serve on
  }

  // Executes one request into `w`; false when the request is malformed.
  bool handle(char op, Reader& r, Writer& w) {
    switch (op) {
      case kSet: {
        std::string key = r.str();
        std::string value = r.str();
        if (!r.ok()) return false;
        {
          std::lock_guard lk(mu_);
          // A bound on what peers may store in all (a job's rendezvous
          // needs kilobytes): past it a set is refused like a bad frame.
          auto [slot, fresh] = data_.try_emplace(key);
          const std::size_t after = stored_bytes_ - (fresh ? 0 : key.size() + slot->second.size()) +
                                    key.size() + value.size();
          if (after > o_.max_total_bytes) {
            if (fresh) data_.erase(slot);
            return false;
          }
          stored_bytes_ = after;
          slot->second = std::vector<char>(value.begin(), value.end());
        }
        cv_.notify_all();
        w.pod<char>(0);
        return true;
      }
      case kGet: {
        const std::string key = r.str();
        const auto timeout_ms = r.pod<std::uint32_t>();
        if (!r.ok()) return false;
        const auto wait = std::min<std::chrono::milliseconds>(  // as kWait
            std::chrono::milliseconds(timeout_ms), o_.timeout);
        std::unique_lock lk(mu_);
        const bool found = cv_.wait_for(lk, wait, [&] { return stop_ || data_.count(key) > 0; });
        if (!found || stop_) {
          w.pod<char>(1);
        } else {
          w.pod<char>(0).bytes(data_[key]);
        }
        return true;
      }
      case kWait: {
        const auto count = r.pod<std::uint32_t>();
        std::vector<std::string> keys;
        for (std::uint32_t i = 0; i < count && r.ok(); ++i) keys.push_back(r.str());
        const auto timeout_ms = r.pod<std::uint32_t>();
        if (!r.ok()) return false;
        // At most the store's own deadline: a peer's 2^32 ms would hold a
        // connection thread for 49 days.
        const auto wait =
            std::min<std::chrono::milliseconds>(std::chrono::milliseconds(timeout_ms), o_.timeout);
        std::unique_lock lk(mu_);
        const bool found = cv_.wait_for(lk, wait, [&] {
          if (stop_) return true;
          for (const auto& k : keys) {
            if (!data_.count(k)) return false;
          }
          return true;
        });
        w.pod<char>(found && !stop_ ? 0 : 1);
        return true;
      }
      case kAdd: {
        const std::string key = r.str();
        const auto delta = r.pod<std::int64_t>();
        if (!r.ok()) return false;
        std::int64_t value = 0;
        {
          std::lock_guard lk(mu_);
          auto [it, fresh] = data_.try_emplace(key);
          auto& slot = it->second;
          const std::size_t after =
              stored_bytes_ - (fresh ? 0 : key.size() + slot.size()) + key.size() + sizeof value;
          if (after > o_.max_total_bytes) {  // as kSet
            if (fresh) data_.erase(it);
            return false;
          }
          stored_bytes_ = after;
          if (slot.size() == sizeof value) std::memcpy(&value, slot.data(), sizeof value);
          // A sum past int64 is refused like a bad frame (found by fuzzing:
          // it was signed overflow).
          if (__builtin_add_overflow(value, delta, &value)) {
            if (fresh) data_.erase(it);
            return false;
          }
          slot.resize(sizeof value);
          std::memcpy(slot.data(), &value, sizeof value);
        }
        cv_.notify_all();
        w.pod<char>(0).pod(value);
        return true;
      }
      case kLost: {
        const auto lost = lost_workers();
        w.pod<char>(0).pod(static_cast<std::uint32_t>(lost.size()));
        for (const auto& l : lost)
          w.pod(static_cast<std::int32_t>(l.rank)).str(l.reason).pod<char>(l.left ? 1 : 0);
        return true;
      }
      default:
        return false;
    }
  }

  // The liveness connection of `rank`: heartbeats until a goodbye.
  void watch(const Socket& s, int rank) {
    {
      std::lock_guard lk(mu_);
      ++watching_;
    }
    struct Done {
      StoreServerImpl* self;
      ~Done() {
        {
          std::lock_guard lk(self->mu_);
          --self->watching_;
        }
        self->cv_.notify_all();
      }
    } done{this};
    std::string why;
    for (;;) {
      char beat = 0;
      if (!detail::read_exact(s, &beat, 1, Clock::now() + o_.heartbeat_timeout, why)) {
        std::lock_guard lk(mu_);
        if (stop_) return;
        const std::string reason = why == "timed out"
                                       ? "no heartbeat for " + seconds(o_.heartbeat_timeout)
                                       : "its connection to the chief closed (" + why + ")";
        // Bounded: a peer inventing ranks must not grow the list (and every
        // answer to a lost-workers request) without end (found by fuzzing).
        if (lost_.size() < kMaxLost) lost_.emplace(rank, LostWorker{rank, reason});
        return;
      }
      if (beat == kBye) {
        std::lock_guard lk(mu_);
        if (left_.size() < kMaxLost)
          left_.emplace(rank, LostWorker{rank,
                                         "it left the job (its process ended, or stopped on an "
                                         "error: its own log says why)",
                                         true});
        return;
      }
      if (beat != kBeat) {
        ++rejected_;
        return;
      }
    }
  }

  StoreOptions o_;
  Socket listener_;
  int port_ = 0;
  std::thread accept_thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::map<std::string, std::vector<char>> data_;
  std::size_t stored_bytes_ = 0;  // keys and values in data_
  std::map<int, LostWorker> lost_;
  std::map<int, LostWorker> left_;  // said goodbye (LostWorker::left)
  int watching_ = 0;                // under mu_: heartbeat connections being watched
  struct Connection {
    Socket socket;
    std::thread thread;
    bool done = false;           // under mu_: the thread has finished serving
    bool authenticated = false;  // under mu_: past the handshake
    bool evicted = false;        // under mu_: shut down to make room
  };
  static constexpr std::size_t kMaxConnections = 1024;
  std::size_t max_unauthenticated_ = 64;
  static constexpr std::int64_t kAuthFailuresSaid = 8;
  static constexpr std::size_t kMaxLost = 4096;
  std::atomic<std::int64_t> auth_failures_{0};
  std::list<std::unique_ptr<Connection>> connections_;
  std::atomic<std::int64_t> rejected_{0};
};

// ---------------------------------------------------------------- client

class StoreClientImpl final : public StoreClient {
 public:
  explicit StoreClientImpl(const StoreOptions& o) : o_(o) {
    LOCKSTEP_CHECK(!o.token.empty(), "StoreClient: the job token is empty");
    conn_ = open(o_.timeout);
  }

  ~StoreClientImpl() override {
    if (heartbeat_thread_.joinable()) {
      {
        std::lock_guard lk(hb_mu_);
        hb_stop_ = true;
      }
      hb_cv_.notify_all();
      heartbeat_thread_.join();
    }
  }

  void set(const std::string& key, const std::vector<char>& value) override {
    Writer w;
    w.pod<char>(kSet).str(key).bytes(value);
    request(w, o_.timeout, "set('" + key + "')");
  }

  std::vector<char> get(const std::string& key) override {
    Writer w;
    w.pod<char>(kGet).str(key).pod(timeout_ms());
    std::vector<char> reply = request(w, o_.timeout, "get('" + key + "')");
    Reader r(reply);
    const char status = r.pod<char>();
    if (status != 0)
      throw TimeoutError(lockstep::detail::str_cat(
          "store at ", address(), ": key '", key, "' did not appear within ", seconds(o_.timeout)));
    const std::string value = r.str();
    return std::vector<char>(value.begin(), value.end());
  }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    Writer w;
    w.pod<char>(kWait).pod(static_cast<std::uint32_t>(keys.size()));
    for (const auto& k : keys) w.str(k);
    w.pod(static_cast<std::uint32_t>(timeout.count()));
    std::vector<char> reply = request(w, timeout, "wait");
    if (reply.at(0) != 0) {
      std::string list;
      for (const auto& k : keys) list += (list.empty() ? "'" : ", '") + k + "'";
      throw TimeoutError(lockstep::detail::str_cat("store at ", address(), ": keys ", list,
                                                   " did not all appear within ",
                                                   seconds(timeout)));
    }
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    Writer w;
    w.pod<char>(kAdd).str(key).pod(delta);
    std::vector<char> reply = request(w, o_.timeout, "add('" + key + "')");
    Reader r(reply);
    (void)r.pod<char>();
    return r.pod<std::int64_t>();
  }

  void start_heartbeat(int rank) override {
    LOCKSTEP_CHECK(!heartbeat_thread_.joinable(), "StoreClient: heartbeat already started");
    auto s = std::make_shared<Socket>(open(o_.timeout));
    Writer w;
    w.pod<char>(kHeartbeat).pod(static_cast<std::int32_t>(rank));
    std::string why;
    LOCKSTEP_CHECK_AS(DistributedError, send_frame(*s, w.body(), Clock::now() + o_.timeout, why),
                      "store at ", address(), ": cannot start heartbeats: ", why);
    heartbeat_thread_ = std::thread([this, s] {
      std::string why;
      std::unique_lock lk(hb_mu_);
      for (;;) {
        if (hb_cv_.wait_for(lk, o_.heartbeat_interval, [&] { return hb_stop_; })) break;
        if (!detail::write_all(*s, &kBeat, 1, Clock::now() + o_.heartbeat_interval, why)) return;
      }
      (void)detail::write_all(*s, &kBye, 1, Clock::now() + std::chrono::milliseconds(200), why);
    });
  }

  std::vector<LostWorker> lost_workers() override {
    // A fresh connection with a short deadline: the usual one may be the
    // one that broke.
    const auto deadline = std::chrono::milliseconds(2000);
    Socket s = open(deadline);
    Writer w;
    w.pod<char>(kLost);
    std::string why;
    std::vector<char> reply;
    LOCKSTEP_CHECK_AS(DistributedError,
                      send_frame(s, w.body(), Clock::now() + deadline, why) &&
                          recv_frame(s, reply, o_.max_frame_bytes, Clock::now() + deadline, why),
                      "store at ", address(), ": ", why);
    Reader r(reply);
    (void)r.pod<char>();
    const auto n = r.pod<std::uint32_t>();
    std::vector<LostWorker> out;
    for (std::uint32_t i = 0; i < n && r.ok(); ++i) {
      LostWorker l;
      l.rank = r.pod<std::int32_t>();
      l.reason = r.str();
      l.left = r.pod<char>() != 0;
      if (r.ok()) out.push_back(std::move(l));
    }
    return out;
  }

 private:
  std::string address() const { return o_.host + ":" + std::to_string(o_.port); }
  std::uint32_t timeout_ms() const { return static_cast<std::uint32_t>(o_.timeout.count()); }

  // Connects (retrying while refused) and authenticates.
  Socket open(std::chrono::milliseconds within) {
    const auto deadline = Clock::now() + within;
    std::string error;
    for (;;) {
      Socket s = detail::connect_to(o_.host, o_.port, error);
      if (s.valid()) {
        std::array<char, sizeof kMagic> magic{};
        std::array<unsigned char, kNonceBytes> nonce{};
        std::string why;
        const auto hs = std::min(deadline, Clock::now() + std::chrono::seconds(10));
        if (!detail::read_exact(s, magic.data(), magic.size(), hs, why) ||
            !detail::read_exact(s, nonce.data(), nonce.size(), hs, why))
          throw DistributedError(lockstep::detail::str_cat("store at ", address(),
                                                           ": no greeting from the server: ", why));
        LOCKSTEP_CHECK_AS(DistributedError, std::memcmp(magic.data(), kMagic, sizeof kMagic) == 0,
                          "store at ", address(),
                          ": the server is not a Lockstep store (wrong greeting)");
        const auto mac = hmac_sha256(o_.token, nonce.data(), nonce.size());
        char accepted = 0;
        if (!detail::write_all(s, mac.data(), mac.size(), hs, why) ||
            !detail::read_exact(s, &accepted, 1, hs, why) || accepted != 1)
          throw DistributedError(lockstep::detail::str_cat(
              "store at ", address(),
              ": the chief rejected this worker's job token (is LOCKSTEP_JOB_TOKEN the same on "
              "every worker?)"));
        return s;
      }
      if (Clock::now() >= deadline)
        throw TimeoutError(lockstep::detail::str_cat("cannot reach the chief's store at ",
                                                     address(), " within ", seconds(within), ": ",
                                                     error));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  // Sends one request and returns the reply (one reconnect if the
  // connection was closed while idle).
  std::vector<char> request(Writer& w, std::chrono::milliseconds wait, const std::string& what) {
    std::lock_guard lk(mu_);
    std::string why;
    std::vector<char> reply;
    for (int attempt = 0; attempt < 2; ++attempt) {
      const auto deadline = Clock::now() + wait + std::chrono::seconds(5);
      if (send_frame(conn_, w.body(), deadline, why) &&
          recv_frame(conn_, reply, o_.max_frame_bytes, deadline, why))
        return reply;
      // The server may have closed an idle connection: reconnect once. The
      // chief may also be gone (its job ended or it died): then fail soon.
      if (attempt == 0) conn_ = open(std::min(o_.timeout, std::chrono::milliseconds(5000)));
    }
    throw DistributedError(
        lockstep::detail::str_cat("store at ", address(), ": ", what, " failed: ", why));
  }

  StoreOptions o_;
  std::mutex mu_;
  Socket conn_;
  std::thread heartbeat_thread_;
  std::mutex hb_mu_;
  std::condition_variable hb_cv_;
  bool hb_stop_ = false;
};

}  // namespace

std::unique_ptr<StoreServer> StoreServer::start(const StoreOptions& options) {
  return std::make_unique<StoreServerImpl>(options);
}

std::unique_ptr<StoreClient> StoreClient::connect(const StoreOptions& options) {
  return std::make_unique<StoreClientImpl>(options);
}

}  // namespace lockstep::comm
