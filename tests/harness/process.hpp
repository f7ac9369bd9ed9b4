#pragma once
// Child processes for tests: spawn, wait with a bound, signal. Waiting uses pidfd + poll, so
// it blocks on the child's exit event instead of polling on a timer.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace redislock_test {

class child_process {
 public:
  child_process() = default;
  /// argv[0] is searched in PATH. stdout_fd, when >= 0, becomes the child's stdout; and its
  /// stderr too with also_stderr (a server must not keep the test's own output open: should
  /// the test crash, a runner reading that output would wait for the orphan to exit).
  explicit child_process(const std::vector<std::string>& argv, int stdout_fd = -1, bool also_stderr = false) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (stdout_fd >= 0) posix_spawn_file_actions_adddup2(&actions, stdout_fd, STDOUT_FILENO);
    if (stdout_fd >= 0 && also_stderr) posix_spawn_file_actions_adddup2(&actions, stdout_fd, STDERR_FILENO);
    int rc = posix_spawnp(&pid_, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) throw std::runtime_error("cannot spawn " + argv[0]);
    pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
  }
  child_process(child_process&& o) noexcept { *this = std::move(o); }
  child_process& operator=(child_process&& o) noexcept {
    std::swap(pid_, o.pid_);
    std::swap(pidfd_, o.pidfd_);
    std::swap(status_, o.status_);
    return *this;
  }
  ~child_process() {
    if (running()) {
      signal(SIGKILL);
      wait_for(std::chrono::seconds(10));
    }
    if (pidfd_ >= 0) ::close(pidfd_);
  }

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && status_ < 0; }
  void signal(int sig) const {
    if (running()) ::kill(pid_, sig);
  }

  /// Waits for exit up to `timeout`; returns the exit code (128+signal when killed), or -1 on
  /// timeout (the child keeps running).
  int wait_for(std::chrono::milliseconds timeout) {
    if (!running()) return status_;
    if (pidfd_ >= 0) {
      pollfd p{pidfd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return -1;
    }
    int st = 0;
    if (::waitpid(pid_, &st, pidfd_ >= 0 ? 0 : 0) != pid_) return -1;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return status_;
  }

 private:
  pid_t pid_ = -1;
  int pidfd_ = -1;
  int status_ = -1;
};

/// Reads one line from fd, waiting at most `timeout` (poll on the pipe: no sleeping).
/// Returns what was read so far when the timeout passes or the pipe closes.
inline std::string read_line(int fd, std::chrono::milliseconds timeout) {
  std::string line;
  const auto end = std::chrono::steady_clock::now() + timeout;
  char ch;
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (::poll(&p, 1, static_cast<int>(std::max<long long>(left.count(), 0))) <= 0) break;
    if (::read(fd, &ch, 1) != 1) break;
    if (ch == '\n') return line;
    line.push_back(ch);
  }
  return line;
}

}  // namespace redislock_test
