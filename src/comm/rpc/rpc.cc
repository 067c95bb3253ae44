// The gRPC adapter (the one file outside generated code that sees gRPC and
// protobuf): the messages of include/lockstep/comm/rpc.h to and from
// lockstep_rpc.proto's, the server — one generic callback service that
// authenticates a call from its metadata before it reads the request,
// then parses and answers it on a small pool of threads — and the client
// channel with its deadlines and its handshake.
#include "lockstep/comm/rpc.h"

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "lockstep/comm/store.h"
#include "lockstep_rpc.grpc.pb.h"

namespace lockstep::comm::rpc {
namespace {

namespace pb = lockstep::rpc;
using Clock = std::chrono::system_clock;

constexpr char kAuthKey[] = "lockstep-auth";
constexpr char kHandshake[] = "/lockstep.rpc.Control/Handshake";
constexpr char kHeartbeat[] = "/lockstep.rpc.Control/Heartbeat";
constexpr char kShutdown[] = "/lockstep.rpc.Control/Shutdown";
constexpr char kCreate[] = "/lockstep.rpc.ParameterServer/Create";
constexpr char kRead[] = "/lockstep.rpc.ParameterServer/Read";
constexpr char kAssign[] = "/lockstep.rpc.ParameterServer/Assign";
constexpr char kApply[] = "/lockstep.rpc.ParameterServer/ApplyGradients";
constexpr char kStats[] = "/lockstep.rpc.ParameterServer/Stats";
constexpr char kSetVariables[] = "/lockstep.rpc.Worker/SetVariables";
constexpr char kCreateDataset[] = "/lockstep.rpc.Worker/CreateDataset";
constexpr char kRunFunction[] = "/lockstep.rpc.Worker/RunFunction";

std::string random_bytes(std::size_t n) {
  std::string out(n, '\0');
  LOCKSTEP_CHECK_AS(
      InternalError,
      RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) == 1,
      "rpc: no random bytes from OpenSSL");
  return out;
}

// The MAC a call to `method` carries, in hex: HMAC-SHA256(token,
// "lockstep-rpc-1" \0 nonce \0 method).
std::string call_mac(const std::string& token, const std::string& nonce,
                     const std::string& method) {
  std::string text = "lockstep-rpc-1";
  text.push_back('\0');
  text += nonce;
  text.push_back('\0');
  text += method;
  const std::vector<unsigned char> mac =
      hmac_sha256(token, reinterpret_cast<const unsigned char*>(text.data()), text.size());
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : mac) {
    out.push_back(hex[b >> 4]);
    out.push_back(hex[b & 15]);
  }
  return out;
}

// ---- Messages ----

void to_proto(WireTensor t, pb::Tensor* p) {
  p->set_dtype(std::move(t.dtype));
  for (std::int64_t d : t.shape) p->add_shape(d);
  p->set_data(std::move(t.bytes));
}

WireTensor from_proto(pb::Tensor* p) {
  WireTensor t;
  t.dtype = std::move(*p->mutable_dtype());
  t.shape.assign(p->shape().begin(), p->shape().end());
  t.bytes = std::move(*p->mutable_data());
  return t;
}

void to_proto(VariableEntry v, pb::Variable* p) {
  p->set_id(v.id);
  p->set_name(std::move(v.name));
  p->set_trainable(v.trainable);
  to_proto(std::move(v.value), p->mutable_value());
  for (auto& s : v.slots) {
    pb::NamedTensor* n = p->add_slots();
    n->set_name(std::move(s.name));
    to_proto(std::move(s.value), n->mutable_value());
  }
  p->set_version(v.version);
}

VariableEntry from_proto(pb::Variable* p) {
  VariableEntry v;
  v.id = p->id();
  v.name = std::move(*p->mutable_name());
  v.trainable = p->trainable();
  v.value = from_proto(p->mutable_value());
  for (auto& s : *p->mutable_slots())
    v.slots.push_back({std::move(*s.mutable_name()), from_proto(s.mutable_value())});
  v.version = p->version();
  return v;
}

void to_proto(const OptimizerSpec& o, pb::OptimizerSpec* p) {
  p->set_class_name(o.class_name);
  for (const auto& [name, value] : o.arguments) {
    pb::OptimizerArgument* a = p->add_arguments();
    a->set_name(name);
    if (const bool* flag = std::get_if<bool>(&value)) {
      a->set_flag(*flag);
    } else {
      a->set_number(std::get<double>(value));
    }
  }
}

OptimizerSpec from_proto(const pb::OptimizerSpec& p) {
  OptimizerSpec o;
  o.class_name = p.class_name();
  for (const auto& a : p.arguments()) {
    if (a.value_case() == pb::OptimizerArgument::kFlag) {
      o.arguments.emplace_back(a.name(), a.flag());
    } else {
      o.arguments.emplace_back(a.name(), a.number());
    }
  }
  return o;
}

void to_proto(VariableLayout v, pb::VariableLayout* p) {
  p->set_index(v.index);
  p->set_name(std::move(v.name));
  p->set_dtype(std::move(v.dtype));
  for (std::int64_t d : v.shape) p->add_shape(d);
  for (const ShardLayout& s : v.shards) {
    pb::Shard* q = p->add_shards();
    q->set_ps_task(s.ps_task);
    q->set_id(s.id);
    q->set_rows(s.rows);
  }
  p->set_trainable(v.trainable);
}

VariableLayout from_proto(pb::VariableLayout* p) {
  VariableLayout v;
  v.index = p->index();
  v.name = std::move(*p->mutable_name());
  v.dtype = std::move(*p->mutable_dtype());
  v.shape.assign(p->shape().begin(), p->shape().end());
  for (const auto& s : p->shards()) v.shards.push_back({s.ps_task(), s.id(), s.rows()});
  v.trainable = p->trainable();
  return v;
}

// ---- Server ----

// A fixed pool of threads running the calls' work, first come first served.
class WorkPool {
 public:
  explicit WorkPool(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { loop(); });
  }
  ~WorkPool() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void submit(std::function<void()> job) {
    {
      std::lock_guard lk(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stopping, and every job done
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

grpc::Status failure(const std::exception& e) {
  if (dynamic_cast<const ValueError*>(&e))
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, e.what());
  return grpc::Status(grpc::StatusCode::INTERNAL, e.what());
}

template <typename Message>
bool parse(grpc::ByteBuffer& buffer, Message* message) {
  return grpc::SerializationTraits<Message>::Deserialize(&buffer, message).ok();
}

template <typename Message>
grpc::Status reply(const Message& message, grpc::ByteBuffer* out) {
  bool own = false;
  return grpc::SerializationTraits<Message>::Serialize(message, out, &own);
}

class ServerImpl;

// One call: refused at once unless its method is known and its MAC right;
// only then is its request read, and parsed and answered.
class Call final : public grpc::ServerGenericBidiReactor {
 public:
  Call(ServerImpl* server, grpc::GenericCallbackServerContext* context);
  void OnReadDone(bool ok) override;
  void OnDone() override { delete this; }

 private:
  void answer();

  ServerImpl* server_;
  grpc::GenericCallbackServerContext* context_;
  std::string method_;
  grpc::ByteBuffer request_, reply_;
};

class ServerImpl final : public Server, public grpc::CallbackGenericService {
 public:
  ServerImpl(const ServerOptions& o, ParameterServerService* ps, WorkerService* worker)
      : options_(o),
        ps_(ps),
        worker_(worker),
        nonce_(random_bytes(32)),
        pool_(std::max(1, o.threads)) {
    const std::string incarnation = random_bytes(8);
    std::memcpy(&incarnation_, incarnation.data(), sizeof incarnation_);
    for (const char* m : {kHeartbeat, kShutdown, kCreate, kRead, kAssign, kApply, kStats,
                          kSetVariables, kCreateDataset, kRunFunction})
      macs_[m] = call_mac(o.token, nonce_, m);
  }

  void start() {
    grpc::ServerBuilder builder;
    const std::string address = options_.host + ":" + std::to_string(options_.port);
    builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port_);
    // gRPC binds with SO_REUSEPORT by default: a second task started on a
    // live task's port served beside it, and took its calls (issue #41).
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    builder.SetMaxReceiveMessageSize(static_cast<int>(options_.max_message_bytes));
    builder.SetMaxSendMessageSize(static_cast<int>(options_.max_message_bytes));
    builder.RegisterCallbackGenericService(this);
    server_ = builder.BuildAndStart();
    LOCKSTEP_CHECK_AS(IOError, server_ != nullptr && port_ > 0, options_.task, ": cannot serve at ",
                      address,
                      " (is another process bound to that port, or is it not an address of this "
                      "host?)");
  }

  ~ServerImpl() override {
    if (server_) server_->Shutdown(Clock::now() + std::chrono::seconds(5));
  }

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* c) override {
    return new Call(this, c);
  }

  int port() const override { return port_; }
  std::uint64_t incarnation() const override { return incarnation_; }
  std::int64_t rejected_calls() const override { return rejected_.load(); }
  void wait_for_shutdown() override {
    std::unique_lock lk(shutdown_mu_);
    shutdown_cv_.wait(lk, [&] { return shutdown_; });
  }

  // Whether `method` is served here, and its caller knows the token.
  grpc::Status admit(const grpc::GenericCallbackServerContext& c, const std::string& method) {
    const bool known =
        method == kHandshake || method == kHeartbeat || method == kShutdown ||
        (ps_ && method.rfind("/lockstep.rpc.ParameterServer/", 0) == 0 && macs_.count(method)) ||
        (worker_ && method.rfind("/lockstep.rpc.Worker/", 0) == 0 && macs_.count(method));
    if (!known) {
      ++rejected_;
      return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                          options_.task + " does not serve " + method);
    }
    if (method == kHandshake) return grpc::Status::OK;
    const std::string& expected = macs_.at(method);
    const auto& metadata = c.client_metadata();
    auto it = metadata.find(kAuthKey);
    if (it == metadata.end() || it->second.size() != expected.size() ||
        CRYPTO_memcmp(it->second.data(), expected.data(), expected.size()) != 0) {
      ++rejected_;
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          options_.task +
                              ": the call does not carry this job's token (set "
                              "LOCKSTEP_JOB_TOKEN to the job's secret on every task)");
    }
    return grpc::Status::OK;
  }

  WorkPool& pool() { return pool_; }

  // Parses the request of `method`, runs it, and serialises the reply.
  grpc::Status dispatch(const std::string& method, grpc::ByteBuffer& in, grpc::ByteBuffer* out) {
    try {
      return run(method, in, out);
    } catch (const std::exception& e) {
      return failure(e);
    }
  }

 private:
  grpc::Status malformed(const std::string& method) {
    ++rejected_;
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        options_.task + ": a malformed " + method + " request");
  }

  grpc::Status run(const std::string& method, grpc::ByteBuffer& in, grpc::ByteBuffer* out) {
    if (method == kHandshake) {
      // Unauthenticated, so its request (empty) is never parsed.
      pb::HandshakeReply r;
      r.set_nonce(nonce_);
      r.set_task(options_.task);
      r.set_incarnation(incarnation_);
      return reply(r, out);
    }
    if (method == kHeartbeat) {
      pb::HeartbeatReply r;
      r.set_incarnation(incarnation_);
      return reply(r, out);
    }
    if (method == kShutdown) {
      {
        std::lock_guard lk(shutdown_mu_);
        shutdown_ = true;
      }
      shutdown_cv_.notify_all();
      return reply(pb::ShutdownReply(), out);
    }
    if (method == kCreate) {
      pb::CreateRequest q;
      if (!parse(in, &q)) return malformed(method);
      std::vector<VariableEntry> vars;
      for (auto& v : *q.mutable_variables()) vars.push_back(from_proto(&v));
      ps_->create(std::move(vars));
      return reply(pb::CreateReply(), out);
    }
    if (method == kRead) {
      pb::ReadRequest q;
      if (!parse(in, &q)) return malformed(method);
      ReadResult got = ps_->read({q.ids().begin(), q.ids().end()}, q.with_slots());
      pb::ReadReply r;
      for (auto& v : got.variables) to_proto(std::move(v), r.add_variables());
      r.set_iterations(got.iterations);
      return reply(r, out);
    }
    if (method == kAssign) {
      pb::AssignRequest q;
      if (!parse(in, &q)) return malformed(method);
      std::vector<VariableEntry> vars;
      for (auto& v : *q.mutable_variables()) vars.push_back(from_proto(&v));
      ps_->assign(std::move(vars),
                  q.set_iterations() ? std::optional<std::int64_t>(q.iterations()) : std::nullopt);
      return reply(pb::AssignReply(), out);
    }
    if (method == kApply) {
      pb::ApplyRequest q;
      if (!parse(in, &q)) return malformed(method);
      std::vector<Gradient> grads;
      for (auto& g : *q.mutable_gradients())
        grads.push_back({g.id(), from_proto(g.mutable_value()), g.read_version()});
      const ApplyResult got =
          ps_->apply_gradients(from_proto(q.optimizer()), std::move(grads), q.count_iteration());
      pb::ApplyReply r;
      for (std::int64_t s : got.staleness) r.add_staleness(s);
      r.set_iterations(got.iterations);
      return reply(r, out);
    }
    if (method == kStats) {
      pb::StatsRequest q;
      if (!parse(in, &q)) return malformed(method);
      const ParameterServerStats s = ps_->stats();
      pb::StatsReply r;
      r.set_updates(s.updates);
      r.set_staleness_sum(s.staleness_sum);
      r.set_staleness_max(s.staleness_max);
      r.set_iterations(s.iterations);
      r.set_bytes_applied(s.bytes_applied);
      r.set_apply_seconds(s.apply_seconds);
      return reply(r, out);
    }
    if (method == kSetVariables) {
      pb::SetVariablesRequest q;
      if (!parse(in, &q)) return malformed(method);
      std::vector<VariableLayout> vars;
      for (auto& v : *q.mutable_variables()) vars.push_back(from_proto(&v));
      worker_->set_variables(std::move(vars));
      return reply(pb::SetVariablesReply(), out);
    }
    if (method == kCreateDataset) {
      pb::CreateDatasetRequest q;
      if (!parse(in, &q)) return malformed(method);
      DatasetRequest d;
      d.iterator_id = q.iterator_id();
      d.function = q.function();
      for (auto& a : *q.mutable_arguments()) d.arguments.push_back(from_proto(&a));
      d.num_input_pipelines = q.num_input_pipelines();
      d.input_pipeline_id = q.input_pipeline_id();
      d.num_replicas_in_sync = q.num_replicas_in_sync();
      worker_->create_dataset(std::move(d));
      return reply(pb::CreateDatasetReply(), out);
    }
    // kRunFunction (admit() let no other method through).
    pb::RunFunctionRequest q;
    if (!parse(in, &q)) return malformed(method);
    std::vector<FunctionArgument> args;
    for (auto& a : *q.mutable_arguments()) {
      FunctionArgument arg;
      if (a.kind_case() == pb::Argument::kIterator) {
        arg.iterator = a.iterator();
      } else {
        arg.tensor = from_proto(a.mutable_tensor());
      }
      args.push_back(std::move(arg));
    }
    FunctionResult got = worker_->run_function(q.function(), std::move(args));
    pb::RunFunctionReply r;
    for (auto& t : got.results) to_proto(std::move(t), r.add_results());
    r.set_failed(got.failed);
    if (got.failed) {
      pb::FunctionError* e = r.mutable_error();
      e->set_kind(got.error_kind);
      e->set_type(got.error_type);
      e->set_message(got.error_message);
      e->set_ps_task(got.ps_task);
    }
    return reply(r, out);
  }

  ServerOptions options_;
  ParameterServerService* ps_;
  WorkerService* worker_;
  const std::string nonce_;
  std::uint64_t incarnation_ = 0;
  std::map<std::string, std::string> macs_;  // method -> the MAC its calls must carry
  std::atomic<std::int64_t> rejected_{0};
  std::mutex shutdown_mu_;
  std::condition_variable shutdown_cv_;
  bool shutdown_ = false;
  int port_ = 0;
  // Declared before the server: destroyed after it has shut down (its last
  // calls finish on the pool first).
  WorkPool pool_;
  std::unique_ptr<grpc::Server> server_;
};

Call::Call(ServerImpl* server, grpc::GenericCallbackServerContext* context)
    : server_(server), context_(context), method_(context->method()) {
  // Nothing of the request has been read: a stranger's call ends here.
  const grpc::Status admitted = server_->admit(*context_, method_);
  if (!admitted.ok()) {
    Finish(admitted);
    return;
  }
  // The handshake is the one call a stranger may make (it hands out the
  // nonce the MACs are made with), and its request is empty: answered
  // without reading it, so a stranger's body is never read into memory
  // (issue #41: six 480 MiB bodies took a ps task to 2.4 GB).
  if (method_ == kHandshake) {
    answer();
    return;
  }
  StartRead(&request_);
}

void Call::OnReadDone(bool ok) {
  if (!ok) {
    Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no request message"));
    return;
  }
  // Control's calls and a parameter server's (a copy, an update of one
  // variable: short) are answered on gRPC's own thread, saving a hand-off;
  // a worker's functions may run long and go to the pool.
  if (method_.rfind("/lockstep.rpc.Worker/", 0) != 0) {
    answer();
  } else {
    server_->pool().submit([this] { answer(); });
  }
}

void Call::answer() {
  const grpc::Status status = server_->dispatch(method_, request_, &reply_);
  if (status.ok()) {
    StartWriteAndFinish(&reply_, grpc::WriteOptions(), status);
  } else {
    Finish(status);
  }
}

// ---- Client ----

RpcCode code_of(grpc::StatusCode c) {
  switch (c) {
    case grpc::StatusCode::UNAVAILABLE:
      return RpcCode::kUnavailable;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return RpcCode::kDeadlineExceeded;
    case grpc::StatusCode::UNAUTHENTICATED:
      return RpcCode::kUnauthenticated;
    case grpc::StatusCode::CANCELLED:
      return RpcCode::kCancelled;
    case grpc::StatusCode::INVALID_ARGUMENT:
      return RpcCode::kInvalidArgument;
    case grpc::StatusCode::INTERNAL:
      return RpcCode::kInternal;
    default:
      return RpcCode::kOther;
  }
}

std::string short_name(const std::string& method) {
  return method.substr(method.find_last_of('/') + 1);
}

class ChannelImpl final : public Channel {
 public:
  explicit ChannelImpl(const ChannelOptions& o) : o_(o) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(static_cast<int>(o.max_message_bytes));
    args.SetMaxSendMessageSize(static_cast<int>(o.max_message_bytes));
    // Reconnect soon after a restart (gRPC's default backoff grows to 120 s).
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    // A separate connection per channel object (no sharing with others to
    // the same address), so a test's stranger does not share ours.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channel_ = grpc::CreateCustomChannel(o.address, grpc::InsecureChannelCredentials(), args);
    control_ = pb::Control::NewStub(channel_);
    ps_ = pb::ParameterServer::NewStub(channel_);
    worker_ = pb::Worker::NewStub(channel_);
  }

  const std::string& peer() const override { return o_.peer; }

  std::uint64_t connect(std::chrono::milliseconds timeout) override {
    pb::HandshakeReply r;
    invoke(
        kHandshake, timeout, true,
        [&](grpc::ClientContext* c) { return control_->Handshake(c, pb::HandshakeRequest(), &r); },
        false);
    std::lock_guard lk(mu_);
    nonce_ = r.nonce();
    macs_.clear();
    return r.incarnation();
  }

  std::uint64_t heartbeat(std::chrono::milliseconds timeout) override {
    pb::HeartbeatReply r;
    invoke(kHeartbeat, timeout, false, [&](grpc::ClientContext* c) {
      return control_->Heartbeat(c, pb::HeartbeatRequest(), &r);
    });
    return r.incarnation();
  }

  void shutdown() override {
    pb::ShutdownReply r;
    invoke(kShutdown, o_.timeout, false, [&](grpc::ClientContext* c) {
      return control_->Shutdown(c, pb::ShutdownRequest(), &r);
    });
  }

  void create(std::vector<VariableEntry> variables) override {
    pb::CreateRequest q;
    for (auto& v : variables) to_proto(std::move(v), q.add_variables());
    pb::CreateReply r;
    invoke(kCreate, o_.timeout, false,
           [&](grpc::ClientContext* c) { return ps_->Create(c, q, &r); });
  }

  ReadResult read(const std::vector<std::int64_t>& ids, bool with_slots) override {
    pb::ReadRequest q;
    for (std::int64_t id : ids) q.add_ids(id);
    q.set_with_slots(with_slots);
    pb::ReadReply r;
    invoke(kRead, o_.timeout, false, [&](grpc::ClientContext* c) { return ps_->Read(c, q, &r); });
    ReadResult out;
    for (auto& v : *r.mutable_variables()) out.variables.push_back(from_proto(&v));
    out.iterations = r.iterations();
    return out;
  }

  void assign(std::vector<VariableEntry> variables,
              std::optional<std::int64_t> iterations) override {
    pb::AssignRequest q;
    for (auto& v : variables) to_proto(std::move(v), q.add_variables());
    q.set_set_iterations(iterations.has_value());
    q.set_iterations(iterations.value_or(0));
    pb::AssignReply r;
    invoke(kAssign, o_.timeout, false,
           [&](grpc::ClientContext* c) { return ps_->Assign(c, q, &r); });
  }

  ApplyResult apply_gradients(const OptimizerSpec& optimizer, std::vector<Gradient> gradients,
                              bool count_iteration) override {
    pb::ApplyRequest q;
    to_proto(optimizer, q.mutable_optimizer());
    for (auto& g : gradients) {
      pb::Gradient* p = q.add_gradients();
      p->set_id(g.id);
      to_proto(std::move(g.value), p->mutable_value());
      p->set_read_version(g.read_version);
    }
    q.set_count_iteration(count_iteration);
    pb::ApplyReply r;
    invoke(kApply, o_.timeout, false,
           [&](grpc::ClientContext* c) { return ps_->ApplyGradients(c, q, &r); });
    return {{r.staleness().begin(), r.staleness().end()}, r.iterations()};
  }

  ParameterServerStats stats() override {
    pb::StatsReply r;
    invoke(kStats, o_.timeout, false,
           [&](grpc::ClientContext* c) { return ps_->Stats(c, pb::StatsRequest(), &r); });
    return {r.updates(),    r.staleness_sum(), r.staleness_max(),
            r.iterations(), r.bytes_applied(), r.apply_seconds()};
  }

  void set_variables(std::vector<VariableLayout> variables) override {
    pb::SetVariablesRequest q;
    for (auto& v : variables) to_proto(std::move(v), q.add_variables());
    pb::SetVariablesReply r;
    invoke(kSetVariables, o_.timeout, false,
           [&](grpc::ClientContext* c) { return worker_->SetVariables(c, q, &r); });
  }

  void create_dataset(DatasetRequest d) override {
    pb::CreateDatasetRequest q;
    q.set_iterator_id(d.iterator_id);
    q.set_function(d.function);
    for (auto& a : d.arguments) to_proto(std::move(a), q.add_arguments());
    q.set_num_input_pipelines(d.num_input_pipelines);
    q.set_input_pipeline_id(d.input_pipeline_id);
    q.set_num_replicas_in_sync(d.num_replicas_in_sync);
    pb::CreateDatasetReply r;
    invoke(kCreateDataset, o_.timeout, false,
           [&](grpc::ClientContext* c) { return worker_->CreateDataset(c, q, &r); });
  }

  FunctionResult run_function(const std::string& name, std::vector<FunctionArgument> arguments,
                              std::chrono::milliseconds timeout) override {
    pb::RunFunctionRequest q;
    q.set_function(name);
    for (auto& a : arguments) {
      pb::Argument* p = q.add_arguments();
      if (a.iterator >= 0) {
        p->set_iterator(a.iterator);
      } else {
        to_proto(std::move(a.tensor), p->mutable_tensor());
      }
    }
    pb::RunFunctionReply r;
    invoke(kRunFunction, timeout, false,
           [&](grpc::ClientContext* c) { return worker_->RunFunction(c, q, &r); });
    FunctionResult out;
    for (auto& t : *r.mutable_results()) out.results.push_back(from_proto(&t));
    out.failed = r.failed();
    if (out.failed) {
      out.error_kind = r.error().kind();
      out.error_type = r.error().type();
      out.error_message = r.error().message();
      out.ps_task = r.error().ps_task();
    }
    return out;
  }

 private:
  // The MAC for `method` under the current nonce (after a handshake).
  std::string mac(const std::string& method) {
    std::lock_guard lk(mu_);
    auto it = macs_.find(method);
    if (it != macs_.end()) return it->second;
    return macs_[method] = call_mac(o_.token, nonce_, method);
  }
  bool authenticated() {
    std::lock_guard lk(mu_);
    return !nonce_.empty();
  }

  // Runs one call with its deadline (and MAC); a server that restarted
  // (its nonce changed: UNAUTHENTICATED) is greeted again and the call
  // retried once. Failures throw RpcError naming the peer and the call.
  template <typename F>
  void invoke(const char* method, std::chrono::milliseconds timeout, bool wait_for_ready,
              const F& call, bool authenticate = true) {
    if (authenticate && !authenticated()) connect(timeout);
    for (int attempt = 0;; ++attempt) {
      grpc::ClientContext context;
      context.set_deadline(Clock::now() + timeout);
      context.set_wait_for_ready(wait_for_ready);
      if (authenticate) context.AddMetadata(kAuthKey, mac(method));
      const grpc::Status status = call(&context);
      if (status.ok()) return;
      if (authenticate && attempt == 0 &&
          status.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
        connect(timeout);  // a new incarnation of the server, with a new nonce
        continue;
      }
      const RpcCode code = code_of(status.error_code());
      std::string what = o_.peer + ": " + short_name(method) + ": ";
      if (code == RpcCode::kUnavailable) {
        what += "the task is unavailable (" + status.error_message() + ")";
      } else if (code == RpcCode::kDeadlineExceeded) {
        what += "no answer within " + std::to_string(timeout.count() / 1000.0) + " s";
      } else {
        what += status.error_message();
      }
      throw RpcError(code, what);
    }
  }

  ChannelOptions o_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::Control::Stub> control_;
  std::unique_ptr<pb::ParameterServer::Stub> ps_;
  std::unique_ptr<pb::Worker::Stub> worker_;
  std::mutex mu_;
  std::string nonce_;
  std::map<std::string, std::string> macs_;
};

}  // namespace

std::unique_ptr<Server> Server::start(const ServerOptions& o, ParameterServerService* ps,
                                      WorkerService* worker) {
  for (const char* wildcard : {"0.0.0.0", "::", "[::]", "*", ""}) {
    LOCKSTEP_CHECK(o.host != wildcard, o.task, ": will not serve at the wildcard address \"",
                   o.host,
                   "\" (every interface); give the task's own address, as its TF_CONFIG does");
  }
  LOCKSTEP_CHECK(!o.token.empty(), o.task,
                 ": no job token; every call is authenticated with it (set LOCKSTEP_JOB_TOKEN)");
  auto server = std::make_unique<ServerImpl>(o, ps, worker);
  server->start();
  return server;
}

std::shared_ptr<Channel> Channel::open(const ChannelOptions& o) {
  LOCKSTEP_CHECK(!o.token.empty(), o.peer,
                 ": no job token to authenticate with (set "
                 "LOCKSTEP_JOB_TOKEN)");
  return std::make_shared<ChannelImpl>(o);
}

}  // namespace lockstep::comm::rpc
