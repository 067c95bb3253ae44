// Blocking TCP sockets with deadlines, for the rendezvous store (internal).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace lockstep::comm::detail {

using Clock = std::chrono::steady_clock;

// Owns a file descriptor.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close();
  // Wakes a thread blocked on this socket (the fd stays owned).
  void shutdown();

 private:
  int fd_ = -1;
};

// Resolves host:port and listens there (never on all interfaces unless the
// host says so). IOError naming the address on failure.
Socket listen_on(const std::string& host, int port);
int local_port(const Socket& s);
// "ip:port" of the other end ("an unknown address" when it cannot be read).
std::string peer_address(const Socket& s);
// Raises this process's soft limit on open files to its hard limit, as
// servers do (once; errors are ignored: the old limit stays).
void raise_open_file_limit();
// Accepts one connection; an invalid Socket when the listener was shut down.
// A connection, or an invalid socket with `error` set to accept()'s errno
// (0 when the listener was shut down).
Socket accept_from(const Socket& listener, int& error);
// Connects once; an invalid Socket (and `error` set) when refused.
Socket connect_to(const std::string& host, int port, std::string& error);

// Exactly `size` bytes before the deadline; false on EOF, error or deadline
// (`why` says which).
bool read_exact(const Socket& s, void* data, std::size_t size, Clock::time_point deadline,
                std::string& why);
bool write_all(const Socket& s, const void* data, std::size_t size, Clock::time_point deadline,
               std::string& why);

}  // namespace lockstep::comm::detail
