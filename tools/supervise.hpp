#pragma once
// The child side of `redislock run`: the signals redislock handles itself (blocked in every
// thread and read from a signalfd), spawning COMMAND in its own process group, and the loop
// that forwards signals, reacts to a lost lease and waits for COMMAND to exit.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

extern char** environ;

namespace redislock_cli {

/// The signals redislock forwards to COMMAND.
inline bool forwarded(int sig) { return sig == SIGINT || sig == SIGTERM || sig == SIGHUP; }

/// Blocks SIGINT, SIGTERM, SIGHUP and SIGCHLD in the calling thread (call it before any thread
/// starts, so all inherit the mask) and returns a signalfd that reads them.
inline int block_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&set, s);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
}

/// The next pending signal on a signalfd, 0 if none.
inline int read_signal(int sigfd) {
  signalfd_siginfo si{};
  if (::read(sigfd, &si, sizeof si) != static_cast<ssize_t>(sizeof si)) return 0;
  return static_cast<int>(si.ssi_signo);
}

/// A one-shot flag another thread raises without blocking (an eventfd; async-signal-safe).
class event_flag {
 public:
  event_flag() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  ~event_flag() {
    if (fd_ >= 0) ::close(fd_);
  }
  event_flag(const event_flag&) = delete;
  event_flag& operator=(const event_flag&) = delete;
  void raise() const noexcept {
    const std::uint64_t one = 1;
    (void)!::write(fd_, &one, sizeof one);
  }
  int fd() const noexcept { return fd_; }

 private:
  int fd_;
};

/// environ without the variables in `set`, then `set` ("NAME=value" each).
inline std::vector<std::string> child_environment(const std::vector<std::string>& set) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string var(*e);
    bool replaced = false;
    for (const auto& s : set) replaced = replaced || var.compare(0, s.find('=') + 1, s, 0, s.find('=') + 1) == 0;
    if (!replaced) env.push_back(var);
  }
  env.insert(env.end(), set.begin(), set.end());
  return env;
}

/// Spawns argv (searched in PATH) in a new process group, with default signal dispositions and
/// an empty signal mask. Returns the pid, or -errno when it could not be started.
inline pid_t spawn_in_own_group(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE, SIGQUIT}) sigaddset(&defaults, s);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], nullptr, &attr, args.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  return rc == 0 ? pid : -rc;
}

enum class on_lost_action { term, kill, ignore };

/// How COMMAND ended and whether the lease was lost meanwhile.
struct child_outcome {
  int status = 0;  ///< exit status, 128+N for signal N
  bool lost = false;
};

/// Waits for `pid` to exit: forwards SIGINT/SIGTERM/SIGHUP to its process group, and when
/// `lost` is raised calls on_lost() and applies `action` (SIGTERM, then SIGKILL after
/// kill_after; or SIGKILL; or nothing).
template <class OnLost>
child_outcome supervise(pid_t pid, int sigfd, const event_flag& lost, on_lost_action action,
                        std::chrono::milliseconds kill_after, OnLost&& on_lost) {
  using clock = std::chrono::steady_clock;
  child_outcome out;
  std::optional<clock::time_point> kill_at;
  bool lost_seen = false;
  for (;;) {
    int st = 0;
    if (::waitpid(pid, &st, WNOHANG) == pid) {
      out.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      return out;
    }
    int timeout = -1;
    if (kill_at) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*kill_at - clock::now()).count();
      if (left <= 0) {
        ::kill(-pid, SIGKILL);
        kill_at.reset();
        continue;
      }
      timeout = static_cast<int>(left) + 1;
    }
    pollfd fds[2] = {{sigfd, POLLIN, 0}, {lost.fd(), static_cast<short>(lost_seen ? 0 : POLLIN), 0}};
    if (::poll(fds, 2, timeout) < 0 && errno != EINTR) return out;
    while (const int sig = read_signal(sigfd)) {
      if (forwarded(sig)) ::kill(-pid, sig);  // SIGCHLD: the waitpid at the loop's top
    }
    if (!lost_seen && (fds[1].revents & POLLIN) != 0) {
      lost_seen = out.lost = true;
      on_lost();
      if (action == on_lost_action::term) {
        ::kill(-pid, SIGTERM);
        kill_at = clock::now() + kill_after;
      } else if (action == on_lost_action::kill) {
        ::kill(-pid, SIGKILL);
      }
    }
  }
}

}  // namespace redislock_cli
