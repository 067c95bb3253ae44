// The gRPC transport of ParameterServerStrategy (comm/rpc.h): calls and
// their messages round-trip, every call is authenticated before its
// request is read, strangers and junk leave the server serving, deadlines
// hold, and a restarted server is greeted again. The hostile calls are made
// with gRPC's generic stub, so that any bytes can be sent.
#include "lockstep/comm/rpc.h"

#include <arpa/inet.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <thread>

#include "lockstep/comm/store.h"
#include "support/errors.h"

namespace lockstep::comm::rpc {
namespace {

using namespace std::chrono_literals;

// A parameter server that keeps what it is given and counts its calls.
class FakePs final : public ParameterServerService {
 public:
  void create(std::vector<VariableEntry> variables) override {
    ++calls;
    std::lock_guard lk(mu);
    for (auto& v : variables) held[v.id] = std::move(v);
  }
  ReadResult read(const std::vector<std::int64_t>& ids, bool) override {
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(read_delay_ms.load()));
    std::lock_guard lk(mu);
    ReadResult r;
    for (std::int64_t id : ids) r.variables.push_back(held.at(id));
    r.iterations = 7;
    return r;
  }
  void assign(std::vector<VariableEntry>, std::optional<std::int64_t>) override { ++calls; }
  ApplyResult apply_gradients(const OptimizerSpec& o, std::vector<Gradient> g, bool) override {
    ++calls;
    last_optimizer = o;
    return {std::vector<std::int64_t>(g.size(), 2), 8};
  }
  ParameterServerStats stats() override { return {.updates = 3}; }

  std::atomic<int> calls{0};
  std::atomic<int> read_delay_ms{0};
  std::mutex mu;
  std::map<std::int64_t, VariableEntry> held;
  OptimizerSpec last_optimizer;
};

WireTensor floats(std::vector<float> v, std::vector<std::int64_t> shape) {
  return {"float32", std::move(shape),
          std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float))};
}

std::unique_ptr<Server> serve(FakePs& ps, const std::string& token = "secret", int port = 0) {
  return Server::start({.host = "127.0.0.1", .port = port, .token = token, .task = "ps 0"}, &ps,
                       nullptr);
}

std::shared_ptr<Channel> open_channel(int port, const std::string& token = "secret",
                                      std::chrono::milliseconds timeout = 10s) {
  return Channel::open({.address = "127.0.0.1:" + std::to_string(port),
                        .token = token,
                        .peer = "ps 0",
                        .timeout = timeout});
}

// A raw call of `method` with `body` as its request bytes and `mac` (empty:
// none) as its lockstep-auth metadata; the status and the reply's bytes.
std::pair<grpc::Status, std::string> raw_call(int port, const std::string& method,
                                              const std::string& body, const std::string& mac) {
  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 10s);
  if (!mac.empty()) context.AddMetadata("lockstep-auth", mac);
  grpc::Slice slice(body);
  grpc::ByteBuffer request(&slice, 1), response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) { done.set_value(s); });
  const grpc::Status status = done.get_future().get();
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (status.ok() && response.Dump(&slices).ok()) {
    for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return {status, bytes};
}

// The MAC a call of `method` must carry under `token` (the protocol of
// lockstep_rpc.proto), with the nonce of the server's handshake reply (its
// field 1: tag 0x0a, length 32).
std::string mac_for(int port, const std::string& token, const std::string& method) {
  const auto [status, reply] = raw_call(port, "/lockstep.rpc.Control/Handshake", "", "");
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_GE(reply.size(), 34u);
  EXPECT_EQ(reply[0], 0x0a);
  EXPECT_EQ(reply[1], 32);
  std::string text = "lockstep-rpc-1";
  text.push_back('\0');
  text += reply.substr(2, 32);
  text.push_back('\0');
  text += method;
  std::string hex;
  for (unsigned char b :
       hmac_sha256(token, reinterpret_cast<const unsigned char*>(text.data()), text.size())) {
    static const char* digits = "0123456789abcdef";
    hex.push_back(digits[b >> 4]);
    hex.push_back(digits[b & 15]);
  }
  return hex;
}

// A stranger's request body is never read before authentication: the
// handshake, the one call open to all, is answered without reading its
// request, so a body past the server's message limit (which gRPC would
// refuse once read) still gets the nonce; every other call is refused
// before its body is read.
TEST(Rpc, AStrangersBodyIsNeverReadBeforeAuthentication) {
  FakePs ps;
  auto server = Server::start({.host = "127.0.0.1",
                               .token = "secret",
                               .task = "ps 0",
                               .max_message_bytes = std::size_t{1} << 20},
                              &ps, nullptr);
  const std::string body(std::size_t{4} << 20, 'x');
  const auto [status, reply] =
      raw_call(server->port(), "/lockstep.rpc.Control/Handshake", body, "");
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_GE(reply.size(), 34u);
  const auto [create, none] =
      raw_call(server->port(), "/lockstep.rpc.ParameterServer/Create", body, "");
  EXPECT_EQ(create.error_code(), grpc::StatusCode::UNAUTHENTICATED) << create.error_message();
  EXPECT_EQ(ps.calls.load(), 0);
}

// gRPC binds with SO_REUSEPORT unless told otherwise: a second task on a
// live task's port served beside it.
TEST(Rpc, ASecondServerOnALiveServersPortIsRefused) {
  FakePs ps, other;
  auto server = serve(ps);
  try {
    auto second = serve(other, "secret", server->port());
    ADD_FAILURE() << "a second server took port " << server->port();
  } catch (const IOError& e) {
    EXPECT_NE(
        std::string(e.what()).find("cannot serve at 127.0.0.1:" + std::to_string(server->port())),
        std::string::npos)
        << e.what();
  }
  auto channel = open_channel(server->port());
  EXPECT_EQ(channel->connect(10s), server->incarnation());
}

TEST(Rpc, CallsRoundTripTheirMessages) {
  FakePs ps;
  auto server = serve(ps);
  auto channel = open_channel(server->port());
  EXPECT_EQ(channel->connect(10s), server->incarnation());
  channel->create({{.id = 4,
                    .name = "dense/kernel",
                    .value = floats({1, 2, 3, 4, 5, 6}, {2, 3}),
                    .slots = {{"momentum", floats({0.5f}, {1})}},
                    .version = 9}});
  const ReadResult got = channel->read({4}, true);
  ASSERT_EQ(got.variables.size(), 1u);
  const VariableEntry& v = got.variables[0];
  EXPECT_EQ(v.id, 4);
  EXPECT_EQ(v.name, "dense/kernel");
  EXPECT_EQ(v.value.shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(v.value.bytes, floats({1, 2, 3, 4, 5, 6}, {2, 3}).bytes);
  ASSERT_EQ(v.slots.size(), 1u);
  EXPECT_EQ(v.slots[0].name, "momentum");
  EXPECT_EQ(v.version, 9);
  EXPECT_EQ(got.iterations, 7);
  const ApplyResult applied = channel->apply_gradients(
      {.class_name = "Adam", .arguments = {{"beta_1", 0.9}, {"amsgrad", false}}},
      {{.id = 4, .value = floats({1, 1, 1, 1, 1, 1}, {2, 3}), .read_version = 3}}, true);
  EXPECT_EQ(applied.staleness, (std::vector<std::int64_t>{2}));
  EXPECT_EQ(applied.iterations, 8);
  EXPECT_EQ(ps.last_optimizer.class_name, "Adam");
  ASSERT_EQ(ps.last_optimizer.arguments.size(), 2u);
  EXPECT_EQ(std::get<double>(ps.last_optimizer.arguments[0].second), 0.9);
  EXPECT_EQ(std::get<bool>(ps.last_optimizer.arguments[1].second), false);
  EXPECT_EQ(channel->stats().updates, 3);
  EXPECT_EQ(channel->heartbeat(5s), server->incarnation());
  EXPECT_EQ(server->rejected_calls(), 0);
}

TEST(Rpc, AWrongTokenIsRefusedBeforeTheServiceRuns) {
  FakePs ps;
  auto server = serve(ps);
  auto stranger = open_channel(server->port(), "not-the-token");
  try {
    stranger->create({{.id = 1, .value = floats({1}, {1})}});
    ADD_FAILURE() << "a call under the wrong token was served";
  } catch (const RpcError& e) {
    EXPECT_EQ(e.code(), RpcCode::kUnauthenticated) << e.what();
    EXPECT_NE(std::string(e.what()).find("does not carry this job's token"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(ps.calls.load(), 0);
  EXPECT_GE(server->rejected_calls(), 1);
  // The job goes on: the rightful client is served.
  auto channel = open_channel(server->port());
  channel->create({{.id = 1, .value = floats({1}, {1})}});
  EXPECT_EQ(ps.calls.load(), 1);
}

TEST(Rpc, JunkUnderAWrongTokenIsRefusedUnparsedAndUnderTheRightOneAsMalformed) {
  FakePs ps;
  auto server = serve(ps);
  const int port = server->port();
  const std::string junk = "\xff\xff\xff\xff\x0f garbage that is no protobuf \x01\x02";
  const std::string method = "/lockstep.rpc.ParameterServer/Create";
  // No MAC, and a MAC under another token: refused as unauthenticated, not
  // as malformed — the request was never parsed.
  for (const std::string& mac : {std::string(), mac_for(port, "not-the-token", method)}) {
    const auto [status, reply] = raw_call(port, method, junk, mac);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << status.error_message();
  }
  // A valid frame under a wrong token: refused the same way.
  const auto [valid, unused] = raw_call(port, method, "", mac_for(port, "not-the-token", method));
  EXPECT_EQ(valid.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // The same junk with the right MAC is parsed, and refused as malformed.
  const auto [status, reply] = raw_call(port, method, junk, mac_for(port, "secret", method));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("malformed"), std::string::npos);
  // An unknown method is refused too.
  const auto [unknown, none] = raw_call(port, "/lockstep.rpc.Worker/RunFunction", "", "");
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(ps.calls.load(), 0);
  EXPECT_EQ(server->rejected_calls(), 5);
  // Raw junk on the TCP port (no HTTP/2 at all) is gRPC's to drop.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  // gRPC closes the connection at the first bad frame; later sends fail.
  ASSERT_GT(::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL), 0);
  for (int i = 0; i < 100 && ::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL) > 0; ++i) {
  }
  ::close(fd);
  // The server serves on.
  auto channel = open_channel(port);
  channel->create({{.id = 1, .value = floats({1}, {1})}});
  EXPECT_EQ(ps.calls.load(), 1);
}

TEST(Rpc, EveryCallHasADeadline) {
  FakePs ps;
  auto server = serve(ps);
  auto channel = open_channel(server->port(), "secret", 300ms);
  channel->create({{.id = 1, .value = floats({1}, {1})}});
  ps.read_delay_ms = 3000;
  const auto start = std::chrono::steady_clock::now();
  try {
    channel->read({1}, false);
    ADD_FAILURE() << "a slow read returned";
  } catch (const RpcError& e) {
    EXPECT_EQ(e.code(), RpcCode::kDeadlineExceeded) << e.what();
    EXPECT_TRUE(e.peer_lost());
    EXPECT_NE(std::string(e.what()).find("ps 0: Read: no answer within 0.3"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
}

TEST(Rpc, ATaskThatIsGoneIsUnavailableAndARestartedOneIsGreetedAgain) {
  FakePs ps;
  auto server = serve(ps);
  const int port = server->port();
  auto channel = open_channel(port, "secret", 2s);
  const std::uint64_t first = channel->connect(5s);
  server.reset();
  try {
    channel->heartbeat(1s);
    ADD_FAILURE() << "a stopped server answered";
  } catch (const RpcError& e) {
    EXPECT_TRUE(e.peer_lost()) << e.what();
  }
  // Restarted at the same port: a new incarnation with a new nonce; the
  // channel greets it again and the call goes through.
  FakePs again;
  auto restarted = serve(again, "secret", port);
  for (int i = 0;; ++i) {
    try {
      channel->create({{.id = 2, .value = floats({1}, {1})}});
      break;
    } catch (const RpcError& e) {
      ASSERT_TRUE(e.peer_lost() && i < 50) << e.what();
      std::this_thread::sleep_for(100ms);
    }
  }
  EXPECT_EQ(again.calls.load(), 1);
  EXPECT_NE(channel->heartbeat(1s), first);
}

TEST(Rpc, ServersRefuseWildcardAddressesAndAMissingToken) {
  FakePs ps;
  using testing_support::message_of;
  EXPECT_NE(message_of([&] {
              Server::start({.host = "0.0.0.0", .token = "t", .task = "ps 0"}, &ps, nullptr);
            }).find("ps 0: will not serve at the wildcard address \"0.0.0.0\""),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              Server::start({.host = "127.0.0.1", .task = "ps 0"}, &ps, nullptr);
            }).find("ps 0: no job token"),
            std::string::npos);
}

}  // namespace
}  // namespace lockstep::comm::rpc
