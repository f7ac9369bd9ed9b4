#pragma once
// The child side of `redislock run`: the signals redislock handles itself (blocked in every
// thread and read from a signalfd), starting COMMAND in its own process group (fork/exec), and the loop
// that forwards signals, reacts to a lost lease and waits for COMMAND to exit.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

extern char** environ;

namespace redislock_cli {

/// A child whose redislock died before it could exec exits with this (it never runs COMMAND).
constexpr int exit_code_lost_parent = 125;

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

/// Where execvp would find `command`: the name itself when it has a '/', else the first
/// executable file of that name in $PATH. Empty with `error` set (ENOENT, EACCES) otherwise.
inline std::string find_command(const std::string& command, int& error) {
  error = 0;
  if (command.find('/') != std::string::npos) return command;
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  error = ENOENT;
  std::size_t start = 0;
  for (;;) {
    const std::size_t colon = dirs.find(':', start);
    std::string dir = dirs.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + command;
    struct stat st {};
    const bool file = ::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode);
    if (file && ::access(candidate.c_str(), X_OK) == 0) {
      error = 0;
      return candidate;
    }
    if (file) error = EACCES;
    if (colon == std::string::npos) return {};
    start = colon + 1;
  }
}

/// Starts argv (searched in PATH) in a new process group, with default signal dispositions and
/// an empty signal mask. The child is SIGKILLed by the kernel if redislock dies before it
/// (PR_SET_PDEATHSIG): a COMMAND must not run on unprotected once the lock is no longer
/// renewed. Returns the pid, or -errno when it could not be started.
inline pid_t spawn_in_own_group(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  int error = 0;
  const std::string path = find_command(argv[0], error);
  if (error != 0) return -error;
  std::vector<char*> args, envp;  // prepared before fork(): the child only calls async-signal-safe functions
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int report[2];  // the child writes exec's errno here; a successful exec closes it (CLOEXEC)
  if (::pipe2(report, O_CLOEXEC) != 0) return -errno;
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    ::close(report[0]);
    ::close(report[1]);
    return -e;
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(exit_code_lost_parent);  // redislock died already
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE, SIGQUIT}) ::sigaction(s, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(path.c_str(), args.data(), envp.data());
    const int e = errno;
    (void)!::write(report[1], &e, sizeof e);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so the group exists before we signal it (EACCES after exec: fine)
  ::close(report[1]);
  int e = 0;
  ssize_t n;
  do {
    n = ::read(report[0], &e, sizeof e);
  } while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n == static_cast<ssize_t>(sizeof e)) {
    int st = 0;
    ::waitpid(pid, &st, 0);
    return -e;
  }
  return pid;
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
