#pragma once
// The child side of `redislock run`: the signals redislock handles itself (blocked in every
// thread and read from a signalfd), starting COMMAND under a keeper process (fork/exec), and
// the loop that forwards signals, stops COMMAND before the lease can run out and waits until
// every process COMMAND started has exited.
//
// The processes:
//   redislock (holds the lock, renews it, watches the deadlines)
//     keeper: its own process group; a child subreaper (orphans of COMMAND's processes become
//             its children); blocks every signal (only SIGKILL ends it); exits when it has no
//             child left, with COMMAND's status
//       COMMAND: its own process group (the group redislock signals), PR_SET_PDEATHSIG=SIGKILL
//                towards the keeper
// redislock holds the write end of a pipe the keeper reads: when it closes, because redislock
// died (kill -9, a crash) or gave up on the lease, the keeper SIGKILLs COMMAND's process group
// and each of its own children, round after round, until none is left. The keeper is not
// set-user-ID and keeps no capability, so unlike PR_SET_PDEATHSIG (cleared by the kernel when
// COMMAND execs a set-user-ID binary or one with file capabilities) this covers every COMMAND
// that redislock's user may signal.
// redislock is a child subreaper too: when the keeper alone is killed, what it had (COMMAND,
// the orphans) comes to redislock, which kills and reaps all of it before the lock is released.

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <utility>
#include <string>
#include <vector>

extern char** environ;

namespace redislock_cli {

/// A child whose redislock died before it could exec exits with this (it never runs COMMAND).
constexpr int exit_code_lost_parent = 125;
/// The keeper could not fork COMMAND.
constexpr int exit_cannot_start = 126;

/// The signals that end COMMAND when redislock forwards them (and end a redislock still
/// waiting for the lock).
inline bool forwarded(int sig) { return sig == SIGINT || sig == SIGTERM || sig == SIGHUP; }

/// The job-control signals: redislock does not stop (its renewals would stop with it while
/// COMMAND, in a group of its own, runs on); it suspends COMMAND instead.
inline bool suspends(int sig) { return sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU; }

/// Blocks SIGINT, SIGTERM, SIGHUP, SIGCHLD and the job-control signals (SIGTSTP, SIGTTIN,
/// SIGTTOU, SIGCONT) in the calling thread (call it before any thread starts, so all inherit
/// the mask) and returns a signalfd that reads them. A blocked stop signal does not stop the
/// process; SIGCONT still continues it (a SIGSTOP, which cannot be blocked).
inline int block_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGTSTP, SIGTTIN, SIGTTOU, SIGCONT}) sigaddset(&set, s);
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

/// Where it ran: the keeper's pid (the child redislock waits for), COMMAND's process group,
/// and the pipe whose closing makes the keeper kill everything that is left.
struct spawned {
  pid_t keeper = -1;
  pid_t group = -1;
  int kill_switch = -1;     ///< write end: close() = SIGKILL to every process COMMAND started
  int error = 0;            ///< errno when COMMAND could not be started (then nothing runs)
  bool subreaper = false;   ///< redislock is a child subreaper: a dead keeper's orphans come to it
  bool group_gone = false;  ///< COMMAND's group was found empty: not signalled again (reusable id)

  /// sig to COMMAND's process group, unless it was found empty.
  void signal_group(int sig) {
    if (!group_gone && ::kill(-group, sig) != 0 && errno == ESRCH) group_gone = true;
  }
};

namespace keeper_detail {

// What the keeper (and COMMAND, when exec fails) tells redislock on the report pipe: one
// atomic write each.
struct message {
  int tag;  // 'P' COMMAND's pid, 'E' errno of a failed start
  int value;
};

inline void tell(int fd, int tag, int value) noexcept {
  const message m{tag, value};
  (void)!::write(fd, &m, sizeof m);
}

inline int encode(int wait_status) noexcept {
  return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
}

// SIGKILL to COMMAND's process group and to each child of the keeper (processes that left
// the group and were orphaned to it). Async-signal-safe calls only: the keeper is a fork of a
// threaded process. Once the group is found empty it is not signalled again (its number may
// then be reused).
inline void kill_everything(pid_t group, bool& group_gone) noexcept {
  if (!group_gone && ::kill(-group, SIGKILL) != 0 && errno == ESRCH) group_gone = true;
  char path[64] = "/proc/self/task/";
  std::size_t n = std::strlen(path);
  char digits[16];
  std::size_t d = 0;
  for (pid_t self = ::getpid(); self > 0; self /= 10) digits[d++] = static_cast<char>('0' + self % 10);
  while (d > 0) path[n++] = digits[--d];
  std::memcpy(path + n, "/children", sizeof "/children");
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;  // no CONFIG_PROC_CHILDREN: the group alone
  char buf[4096];
  pid_t pid = 0;
  for (ssize_t got; (got = ::read(fd, buf, sizeof buf)) > 0;) {
    for (ssize_t i = 0; i < got; ++i) {
      if (buf[i] >= '0' && buf[i] <= '9') {
        pid = pid * 10 + (buf[i] - '0');
      } else {
        if (pid > 0) ::kill(pid, SIGKILL);
        pid = 0;
      }
    }
  }
  if (pid > 0) ::kill(pid, SIGKILL);
  ::close(fd);
}

// Closes every descriptor but a and b.
inline void close_all_but(int a, int b) noexcept {
  if (a > b) std::swap(a, b);
  auto close_from_to = [](unsigned int lo, unsigned int hi) {  // close_range(2), or a loop before Linux 5.9
    if (lo > hi || ::syscall(SYS_close_range, lo, hi, 0U) == 0) return;
    for (unsigned int fd = lo; fd <= hi && fd < 1024; ++fd) ::close(static_cast<int>(fd));
  };
  const auto ua = static_cast<unsigned int>(a), ub = static_cast<unsigned int>(b);
  if (ua > 0) close_from_to(0, ua - 1);
  close_from_to(ua + 1, ub - 1);
  close_from_to(ub + 1, ~0U);
}

// The keeper's life once COMMAND runs: reaps every child (COMMAND, then whatever was orphaned
// to it) until none is left; when the kill switch closes, kills them all, again every 20 ms
// (orphans keep arriving as their parents die). Returns COMMAND's status.
inline int keep(pid_t command, int chld_fd, int kill_switch) noexcept {
  int status = exit_code_lost_parent;
  bool killing = false, group_gone = false;
  for (;;) {
    for (;;) {
      int st = 0;
      const pid_t w = ::waitpid(-1, &st, WNOHANG);
      if (w > 0) {
        if (w == command) status = encode(st);
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return status;  // ECHILD: no process of COMMAND's is left
      break;
    }
    if (killing) kill_everything(command, group_gone);
    pollfd fds[2] = {{chld_fd, POLLIN, 0}, {kill_switch, static_cast<short>(killing ? 0 : POLLIN), 0}};
    (void)::poll(fds, 2, killing ? 20 : chld_fd < 0 ? 50 : -1);  // no signalfd: look every 50 ms
    signalfd_siginfo si;
    while (::read(chld_fd, &si, sizeof si) > 0) {
    }
    char byte;
    if (!killing && fds[1].revents != 0 && ::read(kill_switch, &byte, 1) <= 0) killing = true;
  }
}

}  // namespace keeper_detail

/// Starts argv (searched in PATH) under a keeper (see the top of this file), COMMAND in a new
/// process group with default signal dispositions and an empty signal mask. When it could not
/// be started, `error` is set and nothing runs (the keeper is reaped).
inline spawned spawn_supervised(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  spawned out;
  const std::string path = find_command(argv[0], out.error);
  if (out.error != 0) return out;
  std::vector<char*> args, envp;  // prepared before fork(): the children only call async-signal-safe functions
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  int report[2], kill_switch[2];  // report: CLOEXEC, so a successful exec closes COMMAND's copy
  if (::pipe2(report, O_CLOEXEC) != 0) {
    out.error = errno;
    return out;
  }
  if (::pipe2(kill_switch, O_CLOEXEC) != 0) {
    out.error = errno;
    ::close(report[0]);
    ::close(report[1]);
    return out;
  }
  // Before the fork: the keeper's children come to redislock whenever the keeper is killed
  // (see supervise()). Not inherited by the fork.
  out.subreaper = ::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0;
  const pid_t keeper = ::fork();
  if (keeper == 0) {
    sigset_t all;  // only SIGKILL ends the keeper (SIGCHLD is read from a signalfd)
    sigfillset(&all);
    ::sigprocmask(SIG_SETMASK, &all, nullptr);
    ::close(report[0]);
    ::close(kill_switch[1]);
    ::setpgid(0, 0);  // out of redislock's group: a kill -9 of that group leaves the keeper to clean up
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    const int chld_fd = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    pollfd parent_gone{kill_switch[0], POLLIN, 0};
    if (::poll(&parent_gone, 1, 0) == 1) ::_exit(exit_code_lost_parent);  // redislock died already
    const pid_t self = ::getpid();
    const pid_t command = ::fork();
    if (command == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // the keeper killed: COMMAND too (unless set-user-ID)
      if (::getppid() != self) ::_exit(exit_code_lost_parent);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE, SIGQUIT}) ::sigaction(s, &dfl, nullptr);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::execve(path.c_str(), args.data(), envp.data());
      keeper_detail::tell(report[1], 'E', errno);
      ::_exit(127);
    }
    if (command < 0) {
      keeper_detail::tell(report[1], 'E', errno);
      ::_exit(exit_cannot_start);
    }
    ::setpgid(command, command);  // also here, so the group exists before redislock signals it
    keeper_detail::tell(report[1], 'P', command);
    keeper_detail::close_all_but(kill_switch[0], chld_fd);  // redislock's sockets, COMMAND's stdio
    ::_exit(keeper_detail::keep(command, chld_fd, kill_switch[0]));
  }
  const int fork_error = errno;
  ::close(report[1]);
  ::close(kill_switch[0]);
  if (keeper < 0) {
    ::close(report[0]);
    ::close(kill_switch[1]);
    out.error = fork_error;
    return out;
  }
  ::setpgid(keeper, keeper);
  keeper_detail::message m{};
  for (;;) {  // until the keeper and COMMAND (exec or failure) have both closed the pipe
    const ssize_t n = ::read(report[0], &m, sizeof m);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof m)) break;
    if (m.tag == 'P') out.group = m.value;
    if (m.tag == 'E') out.error = m.value;
  }
  ::close(report[0]);
  if (out.error == 0 && out.group < 0) out.error = ECHILD;  // the keeper died before it started COMMAND
  if (out.error != 0) {
    ::close(kill_switch[1]);  // the keeper reaps what there is and exits
    int st = 0;
    while (::waitpid(keeper, &st, 0) < 0 && errno == EINTR) {
    }
    return out;
  }
  out.keeper = keeper;
  out.kill_switch = kill_switch[1];
  return out;
}

enum class on_lost_action { term, kill, ignore };

/// SIGKILL comes this long before the lease can run out, at the latest: 200 ms for the
/// signal's delivery, the processes' exit and redislock's own wake-up, plus 0.1 % of the lease
/// for the server's clock running faster than ours (NTP slews a clock by up to 0.05 %).
inline std::chrono::milliseconds stop_margin(std::chrono::milliseconds lease) {
  return std::chrono::milliseconds(200) + lease / 1000;
}

/// What `run` does when its lease is lost or may run out.
struct stop_policy {
  on_lost_action action = on_lost_action::term;
  std::chrono::milliseconds kill_after{0};  ///< SIGTERM to SIGKILL, with action term
  std::chrono::milliseconds margin{200};    ///< stop_margin(lease)
};

/// How COMMAND ended and whether the lease was lost (or COMMAND stopped for fear of it).
struct child_outcome {
  int status = 0;  ///< exit status, 128+N for signal N
  bool lost = false;
  bool release = true;  ///< false: processes of COMMAND's may run on; leave the lock to its lease
};

/// The children of thread `tid` of process `pid` (its main thread: tid = pid) from /proc,
/// added to `pids`; false when they cannot be read (no CONFIG_PROC_CHILDREN, or it is gone).
inline bool children_of(pid_t pid, const std::string& tid, std::vector<pid_t>& pids) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + tid + "/children");
  if (!in) return false;
  for (pid_t p = 0; in >> p;) pids.push_back(p);
  return in.eof();
}

/// True when no process of COMMAND's runs any more, though the keeper has not exited yet: each
/// child of the keeper (COMMAND and the orphans it took in) is a zombie. A child's own children
/// are handed to the keeper before it turns zombie, so a second look that finds the same
/// children finds every descendant. False when in doubt.
inline bool command_has_ended(pid_t keeper) {
  std::vector<pid_t> before, after;
  const std::string main_thread = std::to_string(keeper);  // the keeper has no other thread
  if (!children_of(keeper, main_thread, before)) return false;
  for (const pid_t p : before) {
    std::ifstream stat("/proc/" + std::to_string(p) + "/stat");
    std::string text;
    if (!std::getline(stat, text)) return false;
    const auto paren = text.rfind(')');
    if (paren == std::string::npos || paren + 2 >= text.size() || (text[paren + 2] != 'Z' && text[paren + 2] != 'X'))
      return false;
  }
  return children_of(keeper, main_thread, after) && after == before;
}

/// The children of every thread of this process (from /proc; empty without CONFIG_PROC_CHILDREN).
inline std::vector<pid_t> own_children() {
  std::vector<pid_t> pids;
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) return pids;
  while (const dirent* t = ::readdir(tasks)) {
    if (t->d_name[0] != '.') (void)children_of(::getpid(), t->d_name, pids);
  }
  ::closedir(tasks);
  return pids;
}

/// When the keeper was killed: redislock (a child subreaper) has inherited COMMAND and every
/// orphan; SIGKILLs COMMAND's group and all its own children, round after round (orphans keep
/// arriving as their parents die), and reaps them, until it has no child left (true) or
/// `bound` has passed (false: something of COMMAND's may still run).
inline bool kill_and_reap_everything(spawned& child, std::chrono::milliseconds bound) {
  const auto give_up = std::chrono::steady_clock::now() + bound;
  for (;;) {
    int st = 0;
    pid_t w;
    while ((w = ::waitpid(-1, &st, WNOHANG)) > 0 || (w < 0 && errno == EINTR)) {
    }
    if (w < 0) return true;  // ECHILD: no descendant is left (each has a living ancestor below us)
    if (std::chrono::steady_clock::now() >= give_up) return false;
    child.signal_group(SIGKILL);
    for (const pid_t p : own_children()) ::kill(p, SIGKILL);
    ::poll(nullptr, 0, 20);
  }
}

/// Waits until the keeper exits (every process of COMMAND's has): forwards SIGINT/SIGTERM/
/// SIGHUP to COMMAND's process group (with a SIGCONT, so that a suspended COMMAND acts on it),
/// SIGTSTP/SIGTTIN/SIGTTOU as SIGSTOP and SIGCONT as it is, and stops COMMAND (by `policy`) when
///   - the lease was found lost (`lost` raised): at once;
///   - it was not found lost but confirmed_until() (the server's last confirmation of the
///     lease) comes near: SIGTERM at confirmed_until - margin - kill_after, so that
///     SIGKILL, kill_after later, comes `margin` before the lease can run out.
/// SIGKILL never comes later than confirmed_until - margin: when the loop wakes that late
/// (redislock stopped or starved), or the lease is found lost with less time left than
/// kill_after, SIGKILL comes at once without SIGTERM.
/// report(text) is called with what happened. SIGKILL goes to COMMAND's group and, through the
/// kill switch, to every process COMMAND left behind.
template <class ConfirmedUntil, class Report>
child_outcome supervise(spawned& child, const std::string& name, int sigfd, const event_flag& lost,
                        const stop_policy& policy, ConfirmedUntil&& confirmed_until, Report&& report) {
  using clock = std::chrono::steady_clock;
  using std::chrono::milliseconds;
  child_outcome out;
  std::optional<clock::time_point> kill_at, until;  // until: the last confirmed_until() seen
  bool stopping = false, lost_seen = false;
  const bool term = policy.action == on_lost_action::term;
  const milliseconds term_lead = policy.margin + (term ? policy.kill_after : milliseconds(0));
  auto stop = [&](const std::string& why) {
    stopping = true;
    const clock::time_point now = clock::now();
    kill_at = now + (term ? policy.kill_after : milliseconds(0));
    if (until && *until - policy.margin < *kill_at) kill_at = std::max(now, *until - policy.margin);
    if (command_has_ended(child.keeper)) {              // it ended on its own just now: its status stands
      report(why + "; the command has ended already");  // kill_at stays: if the keeper lingers
      return;
    }
    out.lost = true;
    const auto grace = std::chrono::duration_cast<milliseconds>(*kill_at - now).count();
    if (term && grace > 0) {
      report(why + "; sending SIGTERM to the command (SIGKILL in " + std::to_string(grace) + " ms)");
      child.signal_group(SIGTERM);
      child.signal_group(SIGCONT);  // a suspended COMMAND acts on it
    } else {
      report(why +
             (term ? "; no time is left for SIGTERM and --kill-after before the lease can run out: SIGKILL" : ""));
    }
  };
  for (;;) {
    int st = 0;
    if (::waitpid(child.keeper, &st, WNOHANG) == child.keeper) {
      out.status = keeper_detail::encode(st);
      ::close(child.kill_switch);
      child.kill_switch = -1;
      if (!WIFSIGNALED(st)) return out;  // it exits by itself only when no process of COMMAND's is left
      // The keeper was killed: COMMAND must not run on, nor anything it started.
      if (!child.subreaper) {
        child.signal_group(SIGKILL);
        report(
            "the keeper process was killed, and the processes the command started cannot be found: the lock is "
            "not released (its lease runs out)");
        out.release = false;
      } else if (!kill_and_reap_everything(child, std::chrono::seconds(5))) {
        report(
            "the keeper process was killed, and processes the command started did not end after SIGKILL: the "
            "lock is not released (its lease runs out)");
        out.release = false;
      } else {
        report("the keeper process was killed: the command's processes were killed");
      }
      return out;
    }
    const clock::time_point now = clock::now();
    std::optional<clock::time_point> term_at;
    if (policy.action != on_lost_action::ignore) {
      if (const auto u = confirmed_until()) until = u;
    }
    if (!stopping && policy.action != on_lost_action::ignore) {
      if (until) term_at = *until - term_lead;
      if (term_at && now >= *term_at) {
        const auto left = std::chrono::duration_cast<milliseconds>(*term_at + term_lead - now).count();
        stop(left > 0 ? "renewals of the lock '" + name + "' are not confirmed: its lease can run out in " +
                            std::to_string(left) + " ms"
                      : "lost the lock '" + name + "' (no renewal was confirmed in time: its lease may have run out)");
        continue;
      }
    }
    if (kill_at && now >= *kill_at) {
      if (!child.group_gone && ::kill(-child.group, 0) == 0) report("sending SIGKILL to the command's processes");
      child.signal_group(SIGKILL);
      if (child.kill_switch >= 0) ::close(child.kill_switch);  // the keeper kills the rest
      child.kill_switch = -1;
      kill_at.reset();
      continue;
    }
    std::optional<clock::time_point> wake = kill_at;
    if (term_at && (!wake || *term_at < *wake)) wake = term_at;
    int timeout = -1;
    if (wake)  // at most an hour at a time: a 30-day lease's deadline does not fit in an int of ms
      timeout = static_cast<int>(std::min<long long>(std::chrono::ceil<milliseconds>(*wake - now).count(), 3600000));
    pollfd fds[2] = {{sigfd, POLLIN, 0}, {lost.fd(), static_cast<short>(lost_seen ? 0 : POLLIN), 0}};
    if (::poll(fds, 2, timeout) < 0 && errno != EINTR) {  // cannot watch any more: nothing may run on
      child.signal_group(SIGKILL);
      ::close(child.kill_switch);
      child.kill_switch = -1;
      while (::waitpid(child.keeper, &st, 0) < 0 && errno == EINTR) {
      }
      out.status = keeper_detail::encode(st);
      out.lost = true;
      return out;
    }
    while (const int sig = read_signal(sigfd)) {  // SIGCHLD: the waitpid at the loop's top
      if (forwarded(sig)) {
        child.signal_group(sig);
        child.signal_group(SIGCONT);  // a suspended COMMAND acts on it (as a shell's kill does)
      } else if (suspends(sig)) {
        child.signal_group(SIGSTOP);  // COMMAND is suspended; redislock holds and renews the lock
      } else if (sig == SIGCONT) {
        child.signal_group(SIGCONT);
      }
    }
    if (!lost_seen && (fds[1].revents & POLLIN) != 0) {
      lost_seen = true;
      const std::string why = "lost the lock '" + name + "' (its lease ran out or it was broken or taken)";
      if (policy.action == on_lost_action::ignore) {
        out.lost = true;
        report(why + "; the command runs on (--on-lost ignore)");
      } else if (!stopping) {
        stop(why);
      } else {
        report(why);
      }
    }
  }
}

}  // namespace redislock_cli
