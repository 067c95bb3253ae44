#include "socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "lockstep/core/error.h"

namespace lockstep::comm::detail {

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

namespace {

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) freeaddrinfo(list);
  }
};

void resolve(const std::string& host, int port, bool passive, AddrInfo& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &out.list);
  LOCKSTEP_CHECK_AS(IOError, rc == 0, "cannot resolve ", host, ":", port, ": ", gai_strerror(rc));
}

}  // namespace

Socket listen_on(const std::string& host, int port) {
  AddrInfo ai;
  resolve(host, port, true, ai);
  std::string last = "no address";
  for (addrinfo* a = ai.list; a; a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!s.valid()) continue;
    const int one = 1;
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(s.fd(), a->ai_addr, a->ai_addrlen) == 0 && ::listen(s.fd(), 64) == 0) return s;
    last = std::strerror(errno);
  }
  throw IOError(lockstep::detail::str_cat("cannot listen on ", host, ":", port, ": ", last));
}

int local_port(const Socket& s) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  ::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&addr), &len);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

std::string peer_address(const Socket& s) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (::getpeername(s.fd(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return "an unknown address";
  char host[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
    port = ntohs(v4->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
  ::inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
  port = ntohs(v6->sin6_port);
  return "[" + std::string(host) + "]:" + std::to_string(port);
}

void raise_open_file_limit() {
  static std::once_flag once;
  std::call_once(once, [] {
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
      limit.rlim_cur = limit.rlim_max;
      ::setrlimit(RLIMIT_NOFILE, &limit);
    }
  });
}

Socket accept_from(const Socket& listener, int& error) {
  for (;;) {
    const int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      error = 0;
      return Socket(fd);
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    error = errno == EINVAL || errno == EBADF ? 0 : errno;  // EINVAL: shut down
    return Socket();
  }
}

Socket connect_to(const std::string& host, int port, std::string& error) {
  AddrInfo ai;
  try {
    resolve(host, port, false, ai);
  } catch (const IOError& e) {
    error = e.what();
    return Socket();
  }
  for (addrinfo* a = ai.list; a; a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!s.valid()) continue;
    if (::connect(s.fd(), a->ai_addr, a->ai_addrlen) == 0) {
      const int one = 1;
      ::setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return s;
    }
    error = std::strerror(errno);
  }
  return Socket();
}

namespace {

// Waits until the socket is ready for `events` or the deadline passes.
bool wait_ready(const Socket& s, short events, Clock::time_point deadline, std::string& why) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      why = "timed out";
      return false;
    }
    pollfd p{s.fd(), events, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) {
      why = std::strerror(errno);
      return false;
    }
  }
}

}  // namespace

bool read_exact(const Socket& s, void* data, std::size_t size, Clock::time_point deadline,
                std::string& why) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    if (!wait_ready(s, POLLIN, deadline, why)) return false;
    const ssize_t n = ::recv(s.fd(), p, size, 0);
    if (n == 0) {
      why = "connection closed";
      return false;
    }
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      why = std::strerror(errno);
      return false;
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

bool write_all(const Socket& s, const void* data, std::size_t size, Clock::time_point deadline,
               std::string& why) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    if (!wait_ready(s, POLLOUT, deadline, why)) return false;
    const ssize_t n = ::send(s.fd(), p, size, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      why = std::strerror(errno);
      return false;
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace lockstep::comm::detail
