// The RPC transport of ParameterServerStrategy: gRPC servers on the parameter
// servers and workers, and the coordinator's and workers' channels to them
// (gRPC and protobuf from Debian; both stay inside src/comm/rpc/, the
// services are declared in src/comm/rpc/lockstep_rpc.proto). This header
// is their face to the rest of Lockstep: plain structs for the messages,
// interfaces the distribute layer implements for the services, and a
// channel with one method per call.
//
// Security, as the rendezvous store's (comm/store.h): every server binds
// only the address it is given, never a wildcard; every call but Handshake
// carries an HMAC-SHA256 under the job token of the server's nonce and the
// method, checked (constant-time) before the request is read, so a caller
// without the token is refused before any of its bytes is parsed; messages
// are bounded (max_message_bytes). Not provided: confidentiality (the
// traffic is not encrypted) and replay protection against an eavesdropper
// on the network (a captured MAC is valid for that server's lifetime).
//
// Every call has a deadline. A failed call throws RpcError (a
// DistributedError) whose code says whether the peer is gone (kUnavailable,
// kDeadlineExceeded) or refused the call.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "lockstep/core/error.h"

namespace lockstep::comm::rpc {

// ---- Messages ----

// A tensor on the wire: dtype by name ("float32"), shape, little-endian bytes.
struct WireTensor {
  std::string dtype{};
  std::vector<std::int64_t> shape{};
  std::string bytes{};
};

struct NamedWireTensor {
  std::string name{};
  WireTensor value{};
};

// A variable (or one shard of one) on a parameter server.
struct VariableEntry {
  std::int64_t id = 0;
  std::string name{};
  bool trainable = true;
  WireTensor value{};
  std::vector<NamedWireTensor> slots{};  // its optimizer slots ("momentum", ...)
  std::int64_t version = 0;              // updates applied to it
};

struct ReadResult {
  std::vector<VariableEntry> variables{};
  std::int64_t iterations = 0;
};

// An optimizer by its Keras class name and arguments.
struct OptimizerSpec {
  std::string class_name{};
  std::vector<std::pair<std::string, std::variant<bool, double>>> arguments{};
};

struct Gradient {
  std::int64_t id = 0;
  WireTensor value{};
  std::int64_t read_version = 0;
};

struct ApplyResult {
  std::vector<std::int64_t> staleness{};  // per gradient
  std::int64_t iterations = 0;
};

struct ParameterServerStats {
  std::int64_t updates = 0;
  std::int64_t staleness_sum = 0;
  std::int64_t staleness_max = 0;
  std::int64_t iterations = 0;
  std::int64_t bytes_applied = 0;
  double apply_seconds = 0;
};

struct ShardLayout {
  int ps_task = 0;
  std::int64_t id = 0;
  std::int64_t rows = 0;
};

// A variable of the coordinator, as workers bind to it.
struct VariableLayout {
  std::int64_t index = 0;
  std::string name{};
  std::string dtype{};
  std::vector<std::int64_t> shape{};
  std::vector<ShardLayout> shards{};
  bool trainable = true;
};

struct DatasetRequest {
  std::int64_t iterator_id = 0;
  std::string function{};
  std::vector<WireTensor> arguments{};
  int num_input_pipelines = 1;
  int input_pipeline_id = 0;
  int num_replicas_in_sync = 1;
};

// An argument of a function run on a worker: a tensor, or (iterator >= 0)
// the worker's own per-worker iterator of that id.
struct FunctionArgument {
  WireTensor tensor{};
  std::int64_t iterator = -1;
};

struct FunctionResult {
  std::vector<WireTensor> results{};
  bool failed = false;
  std::string error_kind{};  // "function", "ps_unavailable", "end_of_input"
  std::string error_type{};  // the exception's class
  std::string error_message{};
  int ps_task = -1;
};

// ---- Services (implemented by the distribute layer) ----

// Calls may run concurrently on the server's threads. A thrown
// lockstep::Error fails the call with its message (INVALID_ARGUMENT for a
// ValueError, INTERNAL otherwise).
class ParameterServerService {
 public:
  virtual ~ParameterServerService() = default;
  virtual void create(std::vector<VariableEntry> variables) = 0;
  virtual ReadResult read(const std::vector<std::int64_t>& ids, bool with_slots) = 0;
  virtual void assign(std::vector<VariableEntry> variables,
                      std::optional<std::int64_t> iterations) = 0;
  virtual ApplyResult apply_gradients(const OptimizerSpec& optimizer,
                                      std::vector<Gradient> gradients, bool count_iteration) = 0;
  virtual ParameterServerStats stats() = 0;
};

class WorkerService {
 public:
  virtual ~WorkerService() = default;
  virtual void set_variables(std::vector<VariableLayout> variables) = 0;
  virtual void create_dataset(DatasetRequest request) = 0;
  virtual FunctionResult run_function(const std::string& name,
                                      std::vector<FunctionArgument> arguments) = 0;
};

// ---- Errors ----

enum class RpcCode {
  kUnavailable,       // no connection (the process is gone or not up yet)
  kDeadlineExceeded,  // no answer in time
  kUnauthenticated,   // the job token did not match
  kCancelled,
  kInvalidArgument,  // the server refused the request (a ValueError there)
  kInternal,         // the server failed
  kOther,
};

class RpcError : public DistributedError {
 public:
  RpcError(RpcCode code, const std::string& message) : DistributedError(message), code_(code) {}
  RpcCode code() const { return code_; }
  // The peer is gone or did not answer: a lost task, not a refused call.
  bool peer_lost() const {
    return code_ == RpcCode::kUnavailable || code_ == RpcCode::kDeadlineExceeded;
  }

 private:
  RpcCode code_;
};

// ---- Server ----

struct ServerOptions {
  std::string host = "127.0.0.1";  // the task's address from TF_CONFIG; a wildcard is refused
  int port = 0;                    // 0: any free port (tests)
  std::string token{};             // the job token (never sent)
  std::string task{};              // "ps 0": what the server calls itself in errors
  // Requests and replies above this are refused: a bound on what a
  // stranger can make the server hold, and on a variable or gradient.
  std::size_t max_message_bytes = std::size_t{512} << 20;
  int threads = 4;  // a worker's calls served at once (the others run on gRPC's threads)
};

class Server {
 public:
  // Serves `ps` and/or `worker` (either may be null) and Control, on
  // background threads, until destroyed. IOError naming the address when
  // it cannot bind; ValueError for a wildcard address or an empty token.
  static std::unique_ptr<Server> start(const ServerOptions& options, ParameterServerService* ps,
                                       WorkerService* worker);
  virtual ~Server() = default;
  virtual int port() const = 0;
  virtual std::uint64_t incarnation() const = 0;
  // Blocks until a Shutdown call arrives (the coordinator's "the job is done").
  virtual void wait_for_shutdown() = 0;
  // Calls refused for a missing or wrong MAC, or a malformed request.
  virtual std::int64_t rejected_calls() const = 0;
};

// ---- Client ----

struct ChannelOptions {
  std::string address{};  // host:port
  std::string token{};
  std::string peer{};  // how errors name it ("ps 0 (127.0.0.1:2223)")
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};  // every call but RunFunction
  std::size_t max_message_bytes = std::size_t{512} << 20;
};

// One task's channel: authenticates (Handshake) on first use and again
// after the server restarted. Thread-safe; calls may run concurrently. Its
// parameter server calls are the service's own (ParameterServerService),
// made remotely.
class Channel : public ParameterServerService {
 public:
  static std::shared_ptr<Channel> open(const ChannelOptions& options);
  virtual const std::string& peer() const = 0;

  // Waits until the server answers (it may start after us) or `timeout`,
  // authenticates, and returns its incarnation.
  virtual std::uint64_t connect(std::chrono::milliseconds timeout) = 0;
  // A short call (`timeout`): the server's incarnation, or RpcError.
  virtual std::uint64_t heartbeat(std::chrono::milliseconds timeout) = 0;
  virtual void shutdown() = 0;

  // Worker calls. run_function's deadline is its own (a function may run
  // long).
  virtual void set_variables(std::vector<VariableLayout> variables) = 0;
  virtual void create_dataset(DatasetRequest request) = 0;
  virtual FunctionResult run_function(const std::string& name,
                                      std::vector<FunctionArgument> arguments,
                                      std::chrono::milliseconds timeout) = 0;
};

}  // namespace lockstep::comm::rpc
