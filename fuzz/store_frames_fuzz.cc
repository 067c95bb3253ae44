// Fuzz target: what an authenticated peer sends the chief's rendezvous
// store after the handshake — the input is the byte stream of frames
// (length-prefixed set, get, wait, add, heartbeat and lost requests, and
// anything else). The store answers or closes the connection; it must never
// crash, hang, or let a request hold memory or a thread without bound. Its
// deadlines are 50 ms here, and run.sh caps inputs at 1 KiB: at most ~70
// wait requests (3.5 s), so a connection still open after 10 s is a hang.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "lockstep/comm/store.h"

namespace {

constexpr char kToken[] = "fuzz-token";

lockstep::comm::StoreServer& server() {
  static auto s =
      lockstep::comm::StoreServer::start({.host = "127.0.0.1",
                                          .port = 0,
                                          .token = kToken,
                                          .timeout = std::chrono::milliseconds(5),
                                          .max_frame_bytes = std::size_t{1} << 16,
                                          .heartbeat_interval = std::chrono::milliseconds(1),
                                          .heartbeat_timeout = std::chrono::milliseconds(5)});
  return *s;
}

bool read_exact(int fd, void* dst, std::size_t n) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 10000) != 1) return false;
    const ssize_t got = ::recv(fd, p, n, 0);
    if (got <= 0) return false;
    p += got;
    n -= static_cast<std::size_t>(got);
  }
  return true;
}

// A connection past the handshake, or -1. The store gives a handshake its
// own deadline (here 50 ms), which a loaded machine can miss now and then.
int authenticated_connection(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) __builtin_trap();
  // Closed with a reset, not into TIME_WAIT, to stretch loopback's ephemeral
  // ports (run.sh still bounds this target by executions).
  const linger reset{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) __builtin_trap();
  unsigned char hello[8 + 32];
  char accepted = 0;
  if (read_exact(fd, hello, sizeof hello)) {
    const auto mac = lockstep::comm::hmac_sha256(kToken, hello + 8, 32);
    if (::send(fd, mac.data(), mac.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(mac.size()) &&
        read_exact(fd, &accepted, 1) && accepted == 1)
      return fd;
  }
  ::close(fd);
  return -1;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  int fd = -1;
  for (int attempt = 0; attempt < 5 && fd < 0; ++attempt)
    fd = authenticated_connection(server().port());
  if (fd < 0) __builtin_trap();  // the store stopped greeting and admitting
  if (size > 0) (void)::send(fd, data, size, MSG_NOSIGNAL);
  ::shutdown(fd, SHUT_WR);
  // Drain the answers until the store closes (its deadlines bound it).
  char buf[4096];
  for (;;) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 10000) != 1) __builtin_trap();  // the store hung on this input
    if (::recv(fd, buf, sizeof buf, 0) <= 0) break;
  }
  ::close(fd);
  return 0;
}
