#pragma once
/// @file detail/socket_wait.hpp
/// @brief Linux I/O of the pub/sub reader (detail/subscriber.hpp): an eventfd that interrupts
/// its wait, the wait itself (ppoll on the socket and the eventfd, to a deadline), and the
/// loop that flushes hiredis' output buffer.

#include <redislock/detail/no_sigpipe.hpp>
#include <redislock/detail/wait.hpp>
#include <redislock/errors.hpp>

#include <hiredis/hiredis.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <ctime>

namespace redislock::detail {

/// An eventfd: wake() makes the next (or current) wait_readable() return with `woken` set.
class wake_event {
 public:
  wake_event() : fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    if (fd_ < 0) throw connection_error("subscriber: eventfd failed");
  }
  wake_event(const wake_event&) = delete;
  wake_event& operator=(const wake_event&) = delete;
  ~wake_event() { ::close(fd_); }

  void wake() noexcept {
    const std::uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(fd_, &one, sizeof one);
  }
  /// Consumes the pending wake-ups (call after a wait that reported `woken`).
  void drain() noexcept {
    std::uint64_t n;
    [[maybe_unused]] ssize_t r = ::read(fd_, &n, sizeof n);
  }
  int fd() const noexcept { return fd_; }

 private:
  int fd_;
};

/// Blocks until `socket` is readable (or closed), `t` passes, or `w` is woken. False when the
/// socket is not valid or the wait failed; `readable` and `woken` say what ended it.
inline bool wait_readable(int socket, const wake_event& w, steady::time_point t, bool& readable, bool& woken) {
  pollfd p[2] = {{socket, POLLIN, 0}, {w.fd(), POLLIN, 0}};
  for (;;) {
    timespec ts{}, *timeout = nullptr;
    if (t != steady::time_point::max()) {
      const auto left = std::max(steady::duration::zero(), t - steady::now());
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
      ts.tv_sec = static_cast<time_t>(ns / 1000000000);
      ts.tv_nsec = static_cast<long>(ns % 1000000000);
      timeout = &ts;
    }
    int n = ::ppoll(p, 2, timeout, nullptr);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    break;
  }
  readable = (p[0].revents & (POLLIN | POLLERR | POLLHUP)) != 0;
  woken = (p[1].revents & POLLIN) != 0;
  return (p[0].revents & POLLNVAL) == 0;
}

/// Writes everything hiredis has buffered for `ctx` (blocking socket). False on an I/O error.
inline bool flush_output(redisContext* ctx) noexcept {
  const sigpipe_blocked no_sigpipe;
  int done = 0;
  while (!done)
    if (redisBufferWrite(ctx, &done) != REDIS_OK) return false;
  return true;
}

}  // namespace redislock::detail
