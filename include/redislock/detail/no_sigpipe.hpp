#pragma once
/// @file detail/no_sigpipe.hpp
/// @brief Writes to a socket whose peer is gone must fail with EPIPE, not kill the process.
///
/// hiredis writes with write()/send() without MSG_NOSIGNAL, and Linux has no per-socket
/// SO_NOSIGPIPE: writing twice to a connection the server closed (a killed or restarted Redis,
/// CLIENT KILL) raises SIGPIPE, whose default action ends the whole process. The library must
/// not change the process's signal dispositions, so each write made by hiredis or OpenSSL is
/// made with SIGPIPE blocked in the calling thread only (TLS commands and handshakes, the
/// AUTH/SELECT handshake, the subscriber's SUBSCRIBEs); a SIGPIPE the write raised meanwhile is
/// consumed before the mask is restored. The error itself reaches the caller as usual (a
/// connection_error, then reconnect). Plain commands need none of this: redislock::connection
/// sends them itself with send(MSG_NOSIGNAL).

#include <cerrno>
#include <csignal>
#include <ctime>

#include <pthread.h>

namespace redislock::detail {

class sigpipe_blocked {
 public:
  sigpipe_blocked() noexcept {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    blocked_ = pthread_sigmask(SIG_BLOCK, &pipe_, &old_) == 0 && sigismember(&old_, SIGPIPE) != 1;
  }
  sigpipe_blocked(const sigpipe_blocked&) = delete;
  sigpipe_blocked& operator=(const sigpipe_blocked&) = delete;
  ~sigpipe_blocked() {
    if (!blocked_) return;  // the caller had it blocked already: its business
    // A broken pipe leaves a SIGPIPE pending on this thread: take it before unblocking.
    sigset_t pending;
    sigemptyset(&pending);
    if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
      const timespec zero{0, 0};
      while (sigtimedwait(&pipe_, nullptr, &zero) == -1 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t pipe_, old_;
  bool blocked_ = false;
};

}  // namespace redislock::detail
