// Fuzz target: what an authenticated peer sends a parameter-server or
// worker task's RPC server — the input's first byte picks the method
// (Create, Read, Assign, ApplyGradients, Stats, SetVariables, CreateDataset,
// RunFunction, Heartbeat), the rest is its request body, sent as a real
// gRPC call over loopback with the MAC the job token gives (so the body is
// parsed: a stranger's never is, Rpc.AStrangersBodyIsNeverReadBeforeAuthentication).
// The server answers or refuses (INVALID_ARGUMENT for a malformed
// request); it must never crash, hang or hold memory past its message
// limit (1 MiB here). The services behind it keep nothing: the target is
// the RPC layer's parsing and checks (comm/rpc/rpc.cc), not a parameter
// server's arithmetic. Like the tests, it speaks gRPC itself.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/comm/rpc.h"
#include "lockstep/comm/store.h"

namespace {

namespace rpc = lockstep::comm::rpc;

constexpr char kToken[] = "rpc-frames-fuzz-token";
const char* const kMethods[] = {
    "/lockstep.rpc.ParameterServer/Create", "/lockstep.rpc.ParameterServer/Read",
    "/lockstep.rpc.ParameterServer/Assign", "/lockstep.rpc.ParameterServer/ApplyGradients",
    "/lockstep.rpc.ParameterServer/Stats",  "/lockstep.rpc.Worker/SetVariables",
    "/lockstep.rpc.Worker/CreateDataset",   "/lockstep.rpc.Worker/RunFunction",
    "/lockstep.rpc.Control/Heartbeat"};

class NullPs final : public rpc::ParameterServerService {
 public:
  void create(std::vector<rpc::VariableEntry>) override {}
  rpc::ReadResult read(const std::vector<std::int64_t>&, bool) override { return {}; }
  void assign(std::vector<rpc::VariableEntry>, std::optional<std::int64_t>) override {}
  rpc::ApplyResult apply_gradients(const rpc::OptimizerSpec&, std::vector<rpc::Gradient> g,
                                   bool) override {
    return {std::vector<std::int64_t>(g.size(), 0), 0};
  }
  rpc::ParameterServerStats stats() override { return {}; }
};

class NullWorker final : public rpc::WorkerService {
 public:
  void set_variables(std::vector<rpc::VariableLayout>) override {}
  void create_dataset(rpc::DatasetRequest) override {}
  rpc::FunctionResult run_function(const std::string&,
                                   std::vector<rpc::FunctionArgument>) override {
    return {};
  }
};

struct Target {
  NullPs ps;
  NullWorker worker;
  std::unique_ptr<rpc::Server> server;
  std::shared_ptr<grpc::Channel> channel;
  std::vector<std::string> macs;  // per method
};

std::string hex(const std::vector<unsigned char>& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 15]);
  }
  return out;
}

grpc::Status call(grpc::Channel& channel, const std::string& method, const std::string& body,
                  const std::string& mac, std::string* reply) {
  grpc::GenericStub stub(channel.shared_from_this());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (!mac.empty()) context.AddMetadata("lockstep-auth", mac);
  grpc::Slice slice(body);
  grpc::ByteBuffer request(&slice, 1), response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) { done.set_value(s); });
  const grpc::Status status = done.get_future().get();
  std::vector<grpc::Slice> slices;
  if (reply != nullptr && status.ok() && response.Dump(&slices).ok()) {
    for (const auto& s : slices) reply->append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return status;
}

// Made on the first input; destroyed at exit (the server shuts down before
// gRPC's own statics go).
Target& target() {
  static std::unique_ptr<Target> t = [] {
    auto made = std::make_unique<Target>();
    made->server = rpc::Server::start({.host = "127.0.0.1",
                                       .token = kToken,
                                       .task = "fuzz 0",
                                       .max_message_bytes = std::size_t{1} << 20},
                                      &made->ps, &made->worker);
    made->channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(made->server->port()),
                                        grpc::InsecureChannelCredentials());
    // The MACs as lockstep_rpc.proto defines them: HMAC-SHA256(token,
    // "lockstep-rpc-1" \0 nonce \0 method), the nonce from the handshake
    // reply's field 1 (tag 0x0a, 32 bytes).
    std::string reply;
    const grpc::Status s = call(*made->channel, "/lockstep.rpc.Control/Handshake", "", "", &reply);
    if (!s.ok() || reply.size() < 34) __builtin_trap();
    const std::string nonce = reply.substr(2, 32);
    for (const char* m : kMethods) {
      std::string text = "lockstep-rpc-1";
      text.push_back('\0');
      text += nonce;
      text.push_back('\0');
      text += m;
      made->macs.push_back(hex(lockstep::comm::hmac_sha256(
          kToken, reinterpret_cast<const unsigned char*>(text.data()), text.size())));
    }
    return made;
  }();
  return *t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  Target& t = target();
  const std::size_t m = data[0] % (sizeof kMethods / sizeof kMethods[0]);
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  const grpc::Status s = call(*t.channel, kMethods[m], body, t.macs[m], nullptr);
  // A refused call is an answer; a server that stopped answering is a finding.
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
      s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
      s.error_code() == grpc::StatusCode::UNAUTHENTICATED)
    __builtin_trap();
  return 0;
}
