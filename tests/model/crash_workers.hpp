#pragma once
// Other processes on the model's names, so that a client crash (kill -9) is a fault too.
//
// A crash worker is redislock_model itself, started as
//   redislock_model --crash-worker <port> <name> <kind> <lease-ms> <seed>
// It loops on one lock name of one kind (no auto_renew): try_lock_for a random time, then a
// few pauses and extends (longer and shorter than the lease), then unlock, and prints one line
// per call, flushed at once, with CLOCK_MONOTONIC times (the same clock as the model's):
//   call <start> <what>                       before each call (acquire, extend, release)
//   acquire <start> <end> <1|0|-1> <write>    acquired, not acquired, error
//   extend <start> <end> <lease-ms> <1|0|-1>
//   release <start> <end> <status>
// The model kills it with SIGKILL (fault client_crash) and starts another in its place; at the
// end of a run it kills the rest and turns every worker's lines into holds (checks.hpp), so
// the invariants cover them: the crashed holder's lease keeps others out until it ends, and a
// waiter gets the name after it.

#include "checks.hpp"
#include "process.hpp"
#include "subjects.hpp"

#include <redislock/redislock.hpp>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace redislock_model {

/// The worker's body (never returns: killed, or exits on an unusable set-up).
[[noreturn]] inline void crash_worker_main(int port, const std::string& name, kind k, long lease_ms,
                                           std::uint64_t seed) {
  redislock::client_options co;
  co.connection.port = port;
  co.connection.connect_timeout = std::chrono::milliseconds(200);
  co.connection.command_timeout = std::chrono::milliseconds(200);
  redislock::client c(co);
  redislock::lock_options o;
  o.lease = std::chrono::milliseconds(lease_ms);
  o.key_prefix = "model:";
  o.wait_lease = std::chrono::milliseconds(300);
  o.recheck_interval = std::chrono::milliseconds(100);
  std::mt19937_64 rng(seed);
  auto pick = [&](long lo, long hi) { return std::uniform_int_distribution<long>(lo, hi)(rng); };
  auto call = [](const char* what, auto&& f) {
    const std::int64_t start = now_ns();
    std::printf("call %lld %s\n", static_cast<long long>(start), what);
    std::fflush(stdout);
    std::string result;
    try {
      result = f();
    } catch (const std::exception&) {
      result = "-1";
    }
    std::printf("%s %lld %lld %s\n", what, static_cast<long long>(start), static_cast<long long>(now_ns()),
                result.c_str());
    std::fflush(stdout);
    return result;
  };
  std::unique_ptr<subject> s = make_public_subject(k, c, name, o);
  if (!s) std::_Exit(2);
  for (;;) {
    const bool write = k != kind::shared || pick(0, 1) == 0;
    const long wait_ms = pick(0, 2 * lease_ms);
    const std::string got = call("acquire", [&] {
      return std::string(s->acquire(acquire_mode::try_for, std::chrono::milliseconds(wait_ms), write) ? "1" : "0") +
             (write ? " 1" : " 0");
    });
    if (got.rfind("1", 0) != 0) continue;
    for (long i = pick(0, 3); i > 0; --i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(pick(0, lease_ms / 2)));  // a critical section
      const long lease = pick(lease_ms / 5, 2 * lease_ms);
      call("extend",
           [&] { return std::to_string(lease) + (s->extend(std::chrono::milliseconds(lease)) ? " 1" : " 0"); });
    }
    call("release", [&] { return std::string(redislock::to_string(s->unlock())); });
  }
}

/// A worker's printed lines (crash_worker_main), cut short by its kill at `killed_ns`, turned
/// into holds, caps and unknown outcomes in `log` (see crash_worker::record).
template <class Until>
void record_worker_lines(const std::string& text, std::int64_t killed_ns, int name, kind k, run_log& log, int thread,
                         long lease_ms, Until&& until, std::int64_t aftermath_ns) {
  std::istringstream lines(text);
  int held = -1;
  std::int64_t open_call = -1;
  std::string open_what;  // the call the kill cut short, if any
  for (std::string line; std::getline(lines, line);) {
    std::istringstream f(line);
    std::string what;
    long long start = 0, end = 0;
    f >> what >> start;
    if (what == "call") {
      open_call = start;
      f >> open_what;
      continue;
    }
    if (!(f >> end)) break;  // cut short by the kill: still open
    open_call = -1;
    std::string rest;
    std::getline(f, rest);
    log.worker_calls.push_back(
        {start, end,
         "t" + std::to_string(thread) + " n" + std::to_string(name) + " " + to_string(k) + " " + what + rest});
    f = std::istringstream(rest);  // the call's result
    if (what == "acquire") {
      int ok = 0, write = 1;
      f >> ok >> write;
      if (ok < 0) log.busy.push_back({name, start, end + aftermath_ns, thread, false});
      if (ok != 1) continue;
      hold h;
      h.id = static_cast<int>(log.holds.size());
      h.thread = thread;
      h.name = name;
      h.write = write == 1;
      h.permits = is_semaphore(k) ? semaphore_permits : 0;  // one permit of the name's semaphore
      h.acquire_start_ns = start;
      h.acquired_ns = end;
      h.certain.emplace_back(end, until(start, lease_ms));
      h.longest_lease_ms = lease_ms;
      h.owner = "crash worker";
      log.holds.push_back(h);
      held = h.id;
    } else if (what == "extend" && held >= 0) {
      long lease = 0;
      int ok = 0;
      f >> lease >> ok;
      hold& h = log.holds[static_cast<std::size_t>(held)];
      h.longest_lease_ms = std::max(h.longest_lease_ms, lease);
      if (ok < 0) h.caps.push_back({start, 0, until(start, lease), true});
      if (ok != 1) continue;
      h.caps.push_back({start, end, until(start, lease), false});
      h.certain.emplace_back(end, until(start, lease));
    } else if (what == "release" && held >= 0) {
      std::string status;
      f >> status;
      hold& h = log.holds[static_cast<std::size_t>(held)];
      h.end_ns = start;
      h.busy_until_ns = status == "released" ? end : end + h.longest_lease_ms * 1000000LL;
      held = -1;
    }
  }
  log.worker_calls.push_back({killed_ns, killed_ns, "t" + std::to_string(thread) + " killed"});
  if (held >= 0) {  // killed while holding: nothing more renews it, its lease runs out
    hold& h = log.holds[static_cast<std::size_t>(held)];
    // A release on its way may have run (and handed the name on) before the kill.
    h.end_ns = open_call >= 0 && open_what == "release" ? open_call : killed_ns;
    h.busy_until_ns = killed_ns + h.longest_lease_ms * 1000000LL;
  }
  if (open_call >= 0) log.busy.push_back({name, open_call, killed_ns + aftermath_ns, thread, false});
}

/// A self-check of record_worker_lines (ctest model_crash_worker_records). A release still on
/// its way when its worker was killed may have run: it handed the name on, and the next holder
/// took it before the kill. Worker t100 acquires, starts a release at 20 ms and is killed at
/// 50 ms; worker t101 is handed the name and returns at 30 ms. Not an overlap: t100's hold is
/// certain only until its release began. Returns the process's exit status.
inline int check_crash_worker_records() {
  constexpr std::int64_t ms = 1000000;
  run_log log;
  auto until = [](std::int64_t start, long lease_ms) { return start + lease_ms * ms; };
  record_worker_lines("call 0 acquire\nacquire 0 10000000 1 1\ncall 20000000 release\n", 50 * ms, 0, kind::mutex, log,
                      100, 500, until, 0);
  record_worker_lines("call 5000000 acquire\nacquire 5000000 30000000 1 1\n", 60 * ms, 0, kind::mutex, log, 101, 500,
                      until, 0);
  check_overlaps(log, 0);
  for (const auto& f : log.findings)
    std::printf("check_crash_worker_records: %s: %s\n", f.invariant.c_str(), f.detail.c_str());
  std::printf("check_crash_worker_records: %s\n", log.findings.empty() ? "PASS" : "FAIL");
  return log.findings.empty() ? 0 : 1;
}

/// One worker process and the lines it printed (read by a thread of its own until it dies).
class crash_worker {
 public:
  crash_worker(const std::string& self, int port, int name, kind k, long lease_ms, std::uint64_t seed)
      : name_(name), kind_(k) {
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("crash_worker: pipe failed");
    process_ = redislock_test::child_process({self, "--crash-worker", std::to_string(port), "n" + std::to_string(name),
                                              to_string(k), std::to_string(lease_ms), std::to_string(seed)},
                                             out[1]);
    ::close(out[1]);
    reader_ = std::thread([this, fd = out[0]] {
      char buf[4096];
      for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR);)
        if (n > 0) text_.append(buf, static_cast<std::size_t>(n));
      ::close(fd);
    });
  }
  ~crash_worker() { kill(); }
  crash_worker(const crash_worker&) = delete;
  crash_worker& operator=(const crash_worker&) = delete;

  /// SIGKILL, then waits for it to die and for the rest of its output (bounded).
  void kill() {
    if (!reader_.joinable()) return;
    killed_ns_ = now_ns();
    process_.signal(SIGKILL);
    process_.wait_for(std::chrono::seconds(10));
    reader_.join();
  }

  /// After kill(): the holds, caps and unknown outcomes of its calls, into `log`. `thread`
  /// names it in the log; until(start, lease) is the certain end of a lease set at `start`;
  /// aftermath_ns how long a call of unknown outcome may keep the name.
  template <class Until>
  void record(run_log& log, int thread, long lease_ms, Until&& until, std::int64_t aftermath_ns) const {
    record_worker_lines(text_, killed_ns_, name_, kind_, log, thread, lease_ms, std::forward<Until>(until),
                        aftermath_ns);
  }

  int name() const { return name_; }
  kind lock_kind() const { return kind_; }

 private:
  int name_;
  kind kind_;
  redislock_test::child_process process_;
  std::thread reader_;
  std::string text_;  // the reader's until it is joined
  std::int64_t killed_ns_ = LLONG_MAX;
};

}  // namespace redislock_model
