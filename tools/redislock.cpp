// redislock — the command-line tool: `run` a command under a lock, `elect` (run it while
// leading an election), `status` (once or
// --watch), `top` (the busiest names under a prefix), `break`.
// Every usage mistake is found before anything is sent to Redis (exit 2); see help.hpp for
// the exit statuses.

#include "cli_args.hpp"
#include "help.hpp"
#include "supervise.hpp"

#include <redislock/cluster_client.hpp>
#include <redislock/redislock.hpp>
#include <redislock/sentinel_client.hpp>

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <ctime>
#include <map>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

namespace redislock_cli {
namespace {

constexpr int exit_usage = 2;
constexpr int exit_unavailable = 69;                            // sysexits EX_UNAVAILABLE: Redis unreachable or refused
constexpr int exit_conflict = 75;                               // sysexits EX_TEMPFAIL: the lock was not obtained
constexpr int exit_lost = 76;                                   // the lease was lost while COMMAND ran
constexpr int exit_cannot_execute = 126, exit_not_found = 127;  // as the shell's

void say(const std::string& line) { std::fprintf(stderr, "redislock: %s\n", line.c_str()); }

// Options every subcommand takes.
struct common_options {
  // The URL's scheme names the topology: redis://, rediss:// and unix:// one server;
  // redis-cluster:// a Redis Cluster; redis-sentinel:// the master of a Sentinel service.
  enum class topology { single, cluster, sentinel } kind = topology::single;
  redislock::connection_options connection;
  redislock::cluster_options cluster;
  redislock::sentinel_options sentinel;
  redislock::lock_options lock;
  std::string url;
  std::chrono::milliseconds timeout{1000};

  bool parse(arg_cursor& a) {
    std::string v;
    if (a.option("--url", &v)) {
      url = v;
    } else if (a.option("--prefix", &v)) {
      lock.key_prefix = v;
    } else if (a.option("--timeout", &v)) {
      timeout = parse_duration(v, "--timeout");
      if (timeout.count() <= 0) throw usage_error("bad --timeout '" + v + "': must be positive");
    } else {
      return false;
    }
    return true;
  }

  // After parsing: the URL (option, $REDISLOCK_URL, default) is checked here, before any I/O.
  void finish() {
    if (url.empty()) {
      const char* env = std::getenv("REDISLOCK_URL");
      url = env != nullptr && *env != '\0' ? env : "redis://127.0.0.1:6379";
    }
    auto set_timeouts = [this](redislock::connection_options& c) { c.connect_timeout = c.command_timeout = timeout; };
    try {
      if (has_scheme("redis-cluster") || has_scheme("rediss-cluster")) {
        kind = topology::cluster;
        cluster = redislock::parse_cluster_uri(url);
        for (redislock::connection_options& seed : cluster.seeds) set_timeouts(seed);
        cluster.retry_timeout = timeout;  // a failover or migration is waited out within --timeout
        cluster.on_warning = warn;
      } else if (has_scheme("redis-sentinel") || has_scheme("rediss-sentinel")) {
        kind = topology::sentinel;
        sentinel = redislock::parse_sentinel_uri(url);
        set_timeouts(sentinel.connection);  // the sentinels' too
        sentinel.on_warning = warn;
      } else {
        connection = redislock::parse_uri(url);
        set_timeouts(connection);
      }
    } catch (const redislock::invalid_argument& e) {
      throw usage_error(std::string("bad --url / REDISLOCK_URL: ") + e.what());
    }
  }

  // Calls f(client&) with a client of the URL's topology; returns what f returns.
  template <class F>
  int with_client(F&& f) const {
    switch (kind) {
      case topology::cluster: {
        redislock::cluster_client c(cluster);
        return f(c);
      }
      case topology::sentinel: {
        redislock::sentinel_client c(sentinel);
        return f(c);
      }
      case topology::single: break;
    }
    redislock::client_options o;
    o.connection = connection;
    o.on_warning = warn;
    redislock::client c(o);
    return f(c);
  }

 private:
  static void warn(const std::string& m) { say(m); }
  bool has_scheme(std::string_view scheme) const {
    return url.size() > scheme.size() + 3 && url.compare(0, scheme.size(), scheme) == 0 &&
           url.compare(scheme.size(), 3, "://") == 0;
  }
};

// A lock name, checked as the library checks it (empty, brace rules) before any I/O.
std::string checked_name(const std::string& name, const redislock::lock_options& o) {
  try {
    redislock::detail::validate(name, o);
    (void)redislock::detail::base_key(name, o);
  } catch (const redislock::invalid_argument& e) {
    throw usage_error(e.what());
  }
  return name;
}

[[noreturn]] void unknown_option(const std::string& sub, const std::string& opt) {
  throw usage_error("unknown option '" + opt + "' for '" + sub + "' (see 'redislock " + sub + " --help')");
}

bool wants_help(const std::vector<std::string>& args) {
  for (const auto& a : args) {
    if (a == "--") return false;
    if (a == "--help" || a == "-h") return true;
  }
  return false;
}

// ---------------------------------------------------------------------------------------- run

struct run_options {
  common_options common;
  std::string name;
  enum class kind { mutex, read, write, semaphore, election } lock_kind = kind::mutex;
  std::int64_t permits = 0;                       // --permits N (kind::semaphore)
  std::string value;                              // --value V (kind::election, `elect`)
  std::optional<std::chrono::milliseconds> wait;  // nullopt: forever
  int conflict_code = exit_conflict;
  stop_policy stop;  // --on-lost, --kill-after (fit_kill_after)
  std::vector<std::string> command;
};

// With --on-lost term or kill, SIGKILL must come stop_margin(lease) before the lease can run
// out, and SIGTERM must not come before a renewal had its chance: renewals go out every
// lease/3, so SIGTERM waits until half the lease has passed unconfirmed. Hence kill_after +
// margin <= lease/2 (with kill, margin <= lease/2). Without --kill-after: 10 s, or what fits.
void fit_kill_after(stop_policy& stop, const std::optional<std::chrono::milliseconds>& given,
                    std::chrono::milliseconds lease) {
  using std::chrono::milliseconds;
  const milliseconds half = lease / 2;
  stop.margin = stop_margin(lease);
  const milliseconds fits = half - stop.margin;
  if (stop.action == on_lost_action::ignore) {
    stop.kill_after = given.value_or(milliseconds(10000));
    return;
  }
  auto ms = [](milliseconds d) { return std::to_string(d.count()) + " ms"; };
  if (fits.count() < 0)
    throw usage_error("--lease " + ms(lease) + " is too short to stop COMMAND before the lease can run out: with " +
                      "--on-lost term or kill it must be at least 400 ms (SIGKILL comes " + ms(stop.margin) +
                      " before the lease's end, and not before half of it)");
  if (stop.action == on_lost_action::kill) {
    stop.kill_after = milliseconds(0);  // SIGKILL without SIGTERM
    return;
  }
  if (given && *given > fits)
    throw usage_error(
        "--kill-after " + ms(*given) + " does not fit in --lease " + ms(lease) +
        ": SIGTERM comes once half the lease went unconfirmed and SIGKILL " + ms(stop.margin) +
        " (200 ms + 0.1 % of the lease) before the lease's end, so --kill-after may be at most lease/2 - " +
        ms(stop.margin) + " = " + ms(fits) + " (or give a longer --lease)");
  stop.kill_after = given.value_or(std::min(milliseconds(10000), fits));
}

// What `elect` shows as the leader's value without --value: "<host name>:<pid>".
std::string default_leader_value() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return std::string(host[0] != '\0' ? host : "localhost") + ":" + std::to_string(::getpid());
}

// --shared, --write and --permits choose the kind of lock: one at most.
void set_kind(run_options& o, run_options::kind k, const char* option) {
  if (o.lock_kind != run_options::kind::mutex && o.lock_kind != k)
    throw usage_error(std::string(option) + " does not go with --shared, --write or --permits (one kind of lock)");
  o.lock_kind = k;
}

// `run` and `elect` (which campaigns for leadership of NAME instead of taking a lock, with
// --value, before or after NAME; it takes no --shared, --write, --permits or --fair).
run_options parse_run(arg_cursor a, const std::string& sub = "run") {
  const bool elect = sub == "elect";
  run_options o;
  if (elect) o.lock_kind = run_options::kind::election;
  o.common.lock.lease = std::chrono::milliseconds(30000);
  std::optional<std::chrono::milliseconds> kill_after;
  std::string v;
  while (a.at_option()) {
    if (o.common.parse(a)) continue;
    if (elect && a.option("--value", &v)) {
      o.value = v;
    } else if (a.option("--wait", &v)) {
      o.wait = parse_duration(v, "--wait");
    } else if (a.option("--no-wait")) {
      o.wait = std::chrono::milliseconds(0);
    } else if (a.option("--conflict-exit-code", &v)) {
      o.conflict_code = parse_int(v, "--conflict-exit-code", 0, 255);
    } else if (a.option("--lease", &v)) {
      o.common.lock.lease = parse_duration(v, "--lease");
      if (o.common.lock.lease.count() <= 0) throw usage_error("bad --lease '" + v + "': must be positive");
    } else if (!elect && a.option("--shared")) {
      set_kind(o, run_options::kind::read, "--shared");
    } else if (!elect && a.option("--write")) {
      set_kind(o, run_options::kind::write, "--write");
    } else if (!elect && a.option("--permits", &v)) {
      set_kind(o, run_options::kind::semaphore, "--permits");
      o.permits = parse_int(v, "--permits", 1, static_cast<int>(redislock::max_permits));
    } else if (!elect && a.option("--fair")) {
      o.common.lock.fair = true;
    } else if (a.option("--on-lost", &v)) {
      if (v == "term") {
        o.stop.action = on_lost_action::term;
      } else if (v == "kill") {
        o.stop.action = on_lost_action::kill;
      } else if (v == "ignore") {
        o.stop.action = on_lost_action::ignore;
      } else {
        throw usage_error("bad --on-lost '" + v + "': want term, kill or ignore");
      }
    } else if (a.option("--kill-after", &v)) {
      kill_after = parse_duration(v, "--kill-after");
    } else if (a.option("--fence-lifetime", &v)) {
      o.common.lock.fence_lifetime = parse_duration(v, "--fence-lifetime");
      if (o.common.lock.fence_lifetime.count() <= 0)
        throw usage_error("bad --fence-lifetime '" + v + "': must be positive");
    } else {
      unknown_option(sub, a.peek());
    }
  }
  const std::string usage =
      "(usage: redislock " + sub + " [OPTIONS] NAME" + (elect ? " [--value V]" : "") + " -- COMMAND)";
  if (a.done() || a.peek() == "--") throw usage_error(sub + ": missing NAME " + usage);
  o.name = a.take();
  if (elect && !a.done() && a.option("--value", &v)) o.value = v;
  if (a.done() || a.peek() != "--") {
    throw usage_error(a.done() ? sub + ": missing '--' before COMMAND " + usage
                               : sub + ": expected '--' after NAME, got '" + a.peek() + "' (options go before NAME)");
  }
  a.take();
  o.command = a.rest();
  if (o.command.empty()) throw usage_error(sub + ": missing COMMAND after '--'");
  if (elect && o.value.empty()) o.value = default_leader_value();
  fit_kill_after(o.stop, kill_after, o.common.lock.lease);
  o.common.lock.auto_renew = true;
  o.common.finish();
  o.name = checked_name(o.name, o.common.lock);
  return o;
}

// While the lock is being waited for, a signal ends redislock at once: nothing runs yet, a
// place in the queue is skipped as soon as our connection closes, and a lock granted at that
// very moment is left to its lease.
class interrupt_while_waiting {
 public:
  interrupt_while_waiting(int sigfd, const std::string& name)
      : thread_([this, sigfd, name] {
          for (;;) {
            pollfd fds[2] = {{sigfd, POLLIN, 0}, {stop_.fd(), POLLIN, 0}};
            if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
            if (fds[1].revents != 0) return;
            while (const int sig = read_signal(sigfd)) {
              if (!forwarded(sig)) continue;
              say("interrupted (signal " + std::to_string(sig) + ") while waiting for the lock '" + name + "'");
              std::_Exit(128 + sig);
            }
          }
        }) {}
  ~interrupt_while_waiting() {
    stop_.raise();
    thread_.join();
  }

 private:
  event_flag stop_;  // before thread_: the thread reads it
  std::thread thread_;
};

// Why `run` did not get the lock: for a semaphore, its holders and the stored count (inspect(),
// one more round trip on this path only) and, when that count is not --permits, that --permits
// only seeds an idle semaphore.
template <class Lock>
std::string not_obtained(const run_options& o, Lock& lock) {
  if (o.lock_kind == run_options::kind::semaphore) {
    try {
      const redislock::lock_info i = redislock::inspect(lock.client(), o.name, lock.options());
      if (i.kind == redislock::lock_kind::semaphore) {
        std::string m = "the semaphore '" + o.name + "': " + std::to_string(i.holders.size()) + " of " +
                        std::to_string(i.permits) + " permits held";
        if (i.permits != o.permits)
          m += " (stored count " + std::to_string(i.permits) + "; --permits " + std::to_string(o.permits) +
               " applies when the semaphore is idle)";
        return m;
      }
    } catch (const redislock::error&) {  // the plain message
    }
  }
  return "the lock '" + o.name + "' is held by someone else";
}

// The three ways `run` holds a lock, behind one face.
template <class Lock, bool Read>
struct held {
  Lock& lock;
  std::string not_obtained(const run_options& o) { return redislock_cli::not_obtained(o, lock); }
  bool acquire(const std::optional<std::chrono::milliseconds>& wait) {
    if constexpr (Read) {
      if (!wait) {
        lock.lock_shared();
        return true;
      }
      return wait->count() == 0 ? lock.try_lock_shared() : lock.try_lock_shared_for(*wait);
    } else {
      if (!wait) {
        lock.lock();
        return true;
      }
      return wait->count() == 0 ? lock.try_lock() : lock.try_lock_for(*wait);
    }
  }
  std::uint64_t token() { return lock.fencing_token(); }
  std::optional<std::chrono::steady_clock::time_point> confirmed_until() const noexcept {
    if constexpr (Read) {
      return lock.lease_confirmed_until_shared();
    } else {
      return lock.lease_confirmed_until();
    }
  }
  redislock::release_status unlock_and_report() {
    if constexpr (Read) {
      return lock.unlock_shared_and_report();
    } else {
      return lock.unlock_and_report();
    }
  }
};

// `elect`: leadership of NAME is the hold; its term is the fencing token COMMAND gets.
template <class Election>
struct held_leadership {
  Election& election;
  std::string value;
  std::string not_obtained(const run_options& o) const { return "the election '" + o.name + "' has another leader"; }
  bool acquire(const std::optional<std::chrono::milliseconds>& wait) {
    if (!wait) {
      election.campaign(value);
      return true;
    }
    return wait->count() == 0 ? election.try_campaign(value) : election.try_campaign_for(value, *wait);
  }
  std::uint64_t token() { return election.term(); }
  std::optional<std::chrono::steady_clock::time_point> confirmed_until() const noexcept {
    return election.lease_confirmed_until();
  }
  redislock::release_status unlock_and_report() { return election.resign_and_report(); }
};

template <class Hold>
int run_holding(const run_options& o, Hold hold, int sigfd, const event_flag& lost) {
  bool acquired = false;
  {
    interrupt_while_waiting interrupt(sigfd, o.name);
    acquired = hold.acquire(o.wait);
  }
  if (!acquired) {
    say(hold.not_obtained(o) +
        (o.wait && o.wait->count() > 0 ? " (waited " + std::to_string(o.wait->count()) + " ms)" : ""));
    return o.conflict_code;
  }
  std::uint64_t token = 0;
  try {
    token = hold.token();
  } catch (const redislock::lock_error&) {
    say("lost the lock '" + o.name + "' before the command started");
    hold.unlock_and_report();
    return exit_lost;
  }
  spawned child = spawn_supervised(
      o.command, child_environment({"REDISLOCK_NAME=" + o.name, "REDISLOCK_FENCING_TOKEN=" + std::to_string(token),
                                    "REDISLOCK_LEASE_MS=" + std::to_string(o.common.lock.lease.count())}));
  if (child.error != 0) {
    say("cannot run '" + o.command[0] + "': " + std::strerror(child.error));
    hold.unlock_and_report();
    return child.error == ENOENT ? exit_not_found : exit_cannot_execute;
  }
  child_outcome out = supervise(
      child, o.name, sigfd, lost, o.stop, [&] { return hold.confirmed_until(); }, say);
  if (!out.release) {  // processes of COMMAND's may run on: the lease runs out, nobody is handed the lock now
    std::fflush(nullptr);
    std::_Exit(out.status);
  }
  redislock::release_status released = redislock::release_status::failed;
  try {
    released = hold.unlock_and_report();
  } catch (const redislock::error& e) {
    say("could not release the lock '" + o.name + "' (its lease will run out): " + e.what());
  }
  if (released == redislock::release_status::lease_expired && !out.lost) {
    say("the lock '" + o.name +
        "' had been lost when the command finished (its lease ran out, or it was broken or taken)");
    out.lost = true;
  }
  if (out.lost && o.stop.action != on_lost_action::ignore) return exit_lost;
  return out.status;
}

int run(const std::vector<std::string>& args, const std::string& sub = "run") {
  const run_options o = parse_run(arg_cursor(args), sub);
  const int sigfd = block_signals();  // before the client starts any thread
  event_flag lost;
  redislock::lock_options lock_options = o.common.lock;
  lock_options.on_lost = [&lost](const std::string&) { lost.raise(); };  // watchdog thread: no blocking
  return o.common.with_client([&](auto& client) {
    using client_type = std::remove_reference_t<decltype(client)>;
    using mutex_type = redislock::basic_mutex<client_type>;
    using shared_type = redislock::basic_shared_mutex<client_type>;
    using semaphore_type = redislock::basic_semaphore<client_type>;
    using election_type = redislock::basic_election<client_type>;
    if (o.lock_kind == run_options::kind::election) {  // COMMAND runs while this run leads
      election_type e(client, o.name, lock_options);
      return run_holding(o, held_leadership<election_type>{e, o.value}, sigfd, lost);
    }
    if (o.lock_kind == run_options::kind::semaphore) {  // at most --permits copies of COMMAND at once
      semaphore_type s(client, o.name, o.permits, lock_options);
      return run_holding(o, held<semaphore_type, false>{s}, sigfd, lost);
    }
    if (o.lock_kind == run_options::kind::mutex) {
      mutex_type m(client, o.name, lock_options);
      return run_holding(o, held<mutex_type, false>{m}, sigfd, lost);
    }
    shared_type m(client, o.name, lock_options);
    if (o.lock_kind == run_options::kind::read) return run_holding(o, held<shared_type, true>{m}, sigfd, lost);
    return run_holding(o, held<shared_type, false>{m}, sigfd, lost);
  });
}

// ------------------------------------------------------------------------------ status, break

std::string json_string(const std::string& s) {
  std::string r = "\"";
  for (const unsigned char c : s) {
    if (c == '"' || c == '\\') {
      r += '\\';
      r += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      r += buf;
    } else {
      r += static_cast<char>(c);
    }
  }
  return r + "\"";
}

std::string json(const redislock::lock_info& i) {
  std::ostringstream s;
  s << "{\"name\":" << json_string(i.name) << ",\"key\":" << json_string(i.key) << ",\"kind\":\""
    << redislock::to_string(i.kind) << "\",\"held\":" << (i.held() ? "true" : "false")
    << ",\"ttl_ms\":" << i.key_ttl.count() << ",\"last_fencing_token\":" << i.last_fence << ",\"waiters\":" << i.waiters
    << ",\"writer_waiting_ms\":" << i.writer_waiting.count() << ",\"permits\":" << i.permits;
  if (i.kind == redislock::lock_kind::latch)
    s << ",\"latch_count\":" << i.latch_count << ",\"latch_initial\":" << i.latch_initial
      << ",\"latch_round\":" << i.latch_round;
  s << ",\"holders\":[";
  for (std::size_t k = 0; k < i.holders.size(); ++k) {
    const auto& h = i.holders[k];
    s << (k ? "," : "") << "{\"owner\":" << json_string(h.owner) << ",\"object\":" << json_string(h.object_id())
      << ",\"role\":\"" << h.role << "\",\"count\":" << h.count << ",\"remaining_ms\":" << h.remaining.count() << "}";
  }
  s << "]}";
  return s.str();
}

std::string seconds(std::chrono::milliseconds ms) {
  if (ms.count() < 0) return "no expiry";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s left", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

std::string text(const redislock::lock_info& i) {
  std::ostringstream s;
  s << i.name << ": ";
  if (i.kind == redislock::lock_kind::foreign) {
    s << "not a lock (the key " << i.key << " holds a " << i.foreign_type << ")\n";
    return s.str();
  }
  if (i.kind == redislock::lock_kind::latch) {
    s << "latch, "
      << (i.latch_count == 0
              ? "open"
              : std::to_string(i.latch_count) + " of " + std::to_string(i.latch_initial) + " left to count down")
      << (i.latch_round > 1 ? " (round " + std::to_string(i.latch_round) + ", started with "
                            : std::string(" (created with "))
      << i.latch_initial << "), lease " << seconds(i.key_ttl) << "\n";
    s << "  clients waiting: " << i.waiters << "\n";
    return s.str();
  }
  s << (i.held() ? "held" : "free");
  if (i.kind != redislock::lock_kind::none) s << " (" << redislock::to_string(i.kind) << ")";
  if (i.kind == redislock::lock_kind::semaphore) s << ", " << i.holders.size() << " of " << i.permits << " permits";
  s << "\n";
  for (const auto& h : i.holders) {
    s << "  " << h.role << " " << h.owner;
    const bool one_hold = i.kind == redislock::lock_kind::mutex || i.kind == redislock::lock_kind::semaphore ||
                          i.kind == redislock::lock_kind::election;
    if (one_hold) s << " (object " << h.object_id() << ")";
    if (h.count != 1 || !one_hold) s << ", count " << h.count;
    s << ", " << seconds(h.remaining) << "\n";
  }
  if (i.waiters >= 0) s << "  waiters queued: " << i.waiters << "\n";
  if (i.writer_waiting.count() > 0)
    s << "  a writer waits (new readers queue behind it; its place lasts " << seconds(i.writer_waiting) << ")\n";
  s << "  last fencing token: " << i.last_fence << "\n";
  return s.str();
}

// The text (or JSON array) of one snapshot of `names`; all_held tells whether each is held.
template <class Client>
std::string snapshot(Client& client, const std::vector<std::string>& names, const common_options& common, bool as_json,
                     bool& all_held) {
  all_held = true;
  std::string out = as_json ? "[" : "";
  for (std::size_t k = 0; k < names.size(); ++k) {
    const redislock::lock_info info = redislock::inspect(client, names[k], common.lock);
    all_held = all_held && info.held();
    out += as_json ? (k ? "," : "") + json(info) : text(info);
  }
  return out + (as_json ? "]\n" : "");
}

// Set by SIGINT / SIGTERM while a --watch or top loop runs: it ends after the current refresh.
volatile std::sig_atomic_t stop_requested = 0;
extern "C" void request_stop(int) { stop_requested = 1; }

// Sleeps `d` in short slices; false when a stop was requested meanwhile.
bool pause_unless_stopped(std::chrono::milliseconds d) {
  const auto end = std::chrono::steady_clock::now() + d;
  while (!stop_requested) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return true;
    ::poll(nullptr, 0, static_cast<int>(std::min<long long>(left.count(), 100)));  // EINTR: checked above
  }
  return false;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Options of the refreshing views (status --watch, top --watch).
struct refresh_options {
  bool watch = false;
  std::chrono::milliseconds interval{1000};
  int count = 0;  // refreshes before it ends; 0: until Ctrl-C

  bool parse(arg_cursor& a, const char* sub) {
    std::string v;
    if (a.option("--watch")) {
      watch = true;
    } else if (a.option("--interval", &v)) {
      interval = parse_duration(v, "--interval");
      if (interval < min_interval || interval > max_interval)
        throw usage_error(std::string(sub) + ": --interval must be from 100ms to 1h");
    } else if (a.option("--count", &v)) {
      count = parse_int(v, "--count", 1, 1000000);
    } else {
      return false;
    }
    return true;
  }
  static constexpr std::chrono::milliseconds min_interval{100}, max_interval{3600 * 1000};

  // Runs show() once, or every interval until --count refreshes or Ctrl-C; a refresh that
  // fails prints the error and the view goes on. Returns show()'s last status (0 when watching).
  template <class Show>
  int run(Show&& show) const {
    if (!watch) return show();
    stop_requested = 0;
    struct sigaction sa {};
    sa.sa_handler = request_stop;  // no SA_RESTART: a Ctrl-C cuts the pause short
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    const bool terminal = ::isatty(STDOUT_FILENO) != 0;
    for (int n = 1;; ++n) {
      std::fputs(terminal ? "\033[H\033[2J" : "", stdout);
      std::printf("--- %s (refresh %d, every %.1f s; Ctrl-C ends) ---\n", utc_now().c_str(), n,
                  static_cast<double>(interval.count()) / 1000.0);
      try {
        show();
      } catch (const usage_error&) {
        throw;
      } catch (const std::exception& e) {
        std::printf("error: %s\n", e.what());
      }
      std::fflush(stdout);
      if ((count > 0 && n >= count) || !pause_unless_stopped(interval)) return 0;
    }
  }
};

int status(const std::vector<std::string>& args) {
  arg_cursor a(args);
  common_options common;
  refresh_options refresh;
  bool as_json = false;
  while (a.at_option()) {
    if (common.parse(a) || refresh.parse(a, "status")) continue;
    if (a.option("--json")) {
      as_json = true;
    } else {
      unknown_option("status", a.peek());
    }
  }
  if (!a.done() && a.peek() == "--") a.take();
  std::vector<std::string> names = a.rest();
  if (names.empty()) throw usage_error("status: missing NAME (usage: redislock status [--json] [--watch] NAME...)");
  if (refresh.count > 0 && !refresh.watch) throw usage_error("status: --count needs --watch");
  common.finish();
  for (const auto& n : names) checked_name(n, common.lock);
  return common.with_client([&](auto& client) {
    return refresh.run([&] {
      bool all_held = true;
      std::fputs(snapshot(client, names, common, as_json, all_held).c_str(), stdout);
      return all_held ? 0 : 1;
    });
  });
}

// ------------------------------------------------------------------------------ top

// SCAN's MATCH pattern for the keys of names starting with `prefix`: glob characters escaped.
std::string scan_pattern(const std::string& key_prefix, const std::string& prefix) {
  std::string p;
  for (const std::string* part : {&key_prefix, &prefix}) {
    for (char c : *part) {
      if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') p += '\\';
      p += c;
    }
    if (part == &key_prefix) p += '{';
  }
  return p + '*';
}

// The lock name in one of its keys: "<key_prefix>{NAME}" or "<key_prefix>{NAME}:<suffix>".
std::string name_in_key(std::string_view key, const std::string& key_prefix) {
  key.remove_prefix(std::min(key.size(), key_prefix.size() + 1));
  if (!key.empty() && key.back() == '}') return std::string(key.substr(0, key.size() - 1));
  const auto end = key.find("}:");
  return end == std::string_view::npos ? std::string() : std::string(key.substr(0, end));
}

struct scan_budget {
  int count = 200;             // SCAN's COUNT hint
  long long max_keys = 10000;  // keys examined (all nodes) before it stops
  long long examined = 0;
  bool complete = true;
};

// SCANs one node for keys matching `pattern` until its cursor ends or the budget runs out;
// adds the names found. `command` sends one command to that node.
template <class Command>
void scan_node(Command&& command, const std::string& pattern, const std::string& key_prefix, scan_budget& b,
               std::vector<std::string>& names) {
  std::string cursor = "0";
  do {
    if (b.examined >= b.max_keys) {
      b.complete = false;
      return;
    }
    redislock::reply_ptr r = command({"SCAN", cursor, "MATCH", pattern, "COUNT", std::to_string(b.count)});
    const redisReply& next = redislock::detail::element(*r, 0);
    const redisReply& keys = redislock::detail::element(*r, 1);
    cursor.assign(next.str, next.len);
    for (std::size_t i = 0; i < keys.elements; ++i) {
      ++b.examined;
      std::string n = name_in_key(std::string_view(keys.element[i]->str, keys.element[i]->len), key_prefix);
      if (!n.empty()) names.push_back(std::move(n));
    }
  } while (cursor != "0");
}

// Every node to scan: one server (single, Sentinel's master) or every master of a cluster.
template <class Client, class F>
void for_each_node(Client& client, const common_options& common, F&& f) {
  if constexpr (std::is_same_v<Client, redislock::cluster_client>) {
    client.refresh();
    for (const std::string& endpoint : client.masters()) {
      redislock::connection_options o = common.cluster.seeds.front();
      const auto colon = endpoint.rfind(':');
      o.host = endpoint.substr(0, colon);
      o.port = std::stoi(endpoint.substr(colon + 1));
      redislock::connection c(o);
      f([&](std::initializer_list<std::string_view> argv) { return c.command(argv); });
    }
  } else {
    f([&](std::initializer_list<std::string_view> argv) {
      return client.run(std::string_view(), [&](redislock::connection& c) { return c.command(argv); });
    });
  }
}

struct busy_name {
  redislock::lock_info info;
  std::size_t holders() const { return info.holders.size(); }
  long long waiters() const { return std::max<long long>(info.waiters, 0); }
  // The least lease left among the holders (-1 ms: no expiry; 0 when free).
  std::chrono::milliseconds lease_left() const {
    std::chrono::milliseconds least{0};
    bool first = true;
    for (const auto& h : info.holders) {
      if (first || (h.remaining.count() >= 0 && h.remaining < least)) least = h.remaining;
      first = false;
    }
    return least;
  }
};

std::string top_table(std::vector<busy_name>& busy, std::size_t limit, const scan_budget& b, std::size_t nodes,
                      std::size_t names) {
  // Busiest first: most waiters, then most holders, then by name.
  std::sort(busy.begin(), busy.end(), [](const busy_name& x, const busy_name& y) {
    if (x.waiters() != y.waiters()) return x.waiters() > y.waiters();
    if (x.holders() != y.holders()) return x.holders() > y.holders();
    return x.info.name < y.info.name;
  });
  std::ostringstream s;
  char line[256];
  std::snprintf(line, sizeof line, "%-32s %-10s %7s %7s  %s\n", "NAME", "KIND", "HOLDERS", "WAITERS", "LEASE LEFT");
  s << line;
  for (std::size_t i = 0; i < busy.size() && i < limit; ++i) {
    const busy_name& n = busy[i];
    std::snprintf(line, sizeof line, "%-32s %-10s %7zu %7lld  %s\n", n.info.name.c_str(),
                  redislock::to_string(n.info.kind), n.holders(), n.waiters(),
                  n.holders() > 0 ? seconds(n.lease_left()).c_str() : "-");
    s << line;
  }
  s << busy.size() << " busy of " << names << " names; " << b.examined << " keys examined on " << nodes << " node"
    << (nodes == 1 ? "" : "s") << (b.complete ? " (complete)" : " (stopped at --max-keys: partial)") << "\n";
  return s.str();
}

int top(const std::vector<std::string>& args) {
  arg_cursor a(args);
  common_options common;
  refresh_options refresh;
  scan_budget budget;
  std::size_t limit = 20;
  std::string v;
  while (a.at_option()) {
    if (common.parse(a) || refresh.parse(a, "top")) continue;
    if (a.option("--limit", &v)) {
      limit = static_cast<std::size_t>(parse_int(v, "--limit", 1, 10000));
    } else if (a.option("--scan-count", &v)) {
      budget.count = parse_int(v, "--scan-count", 1, 10000);
    } else if (a.option("--max-keys", &v)) {
      budget.max_keys = parse_int(v, "--max-keys", 1, 10000000);
    } else {
      unknown_option("top", a.peek());
    }
  }
  if (!a.done() && a.peek() == "--") a.take();
  const std::vector<std::string> operands = a.rest();
  if (operands.size() > 1) throw usage_error("top: want at most one PREFIX (usage: redislock top [OPTIONS] [PREFIX])");
  if (refresh.count > 0 && !refresh.watch) throw usage_error("top: --count needs --watch");
  const std::string prefix = operands.empty() ? std::string() : operands[0];
  common.finish();
  const std::string pattern = scan_pattern(common.lock.key_prefix, prefix);
  return common.with_client([&](auto& client) {
    return refresh.run([&] {
      scan_budget b = budget;
      std::vector<std::string> names;
      std::size_t nodes = 0;
      for_each_node(client, common, [&](auto&& command) {
        ++nodes;
        scan_node(command, pattern, common.lock.key_prefix, b, names);
      });
      std::sort(names.begin(), names.end());
      names.erase(std::unique(names.begin(), names.end()), names.end());
      std::vector<busy_name> busy;
      for (const std::string& n : names) {
        redislock::lock_info info;
        try {
          info = redislock::inspect(client, n, common.lock);
        } catch (const redislock::invalid_argument&) {
          continue;  // a key under the prefix that no lock name makes
        }
        if (!info.holders.empty() || info.waiters > 0) busy.push_back(busy_name{std::move(info)});
      }
      std::fputs(top_table(busy, limit, b, nodes, names.size()).c_str(), stdout);
      return 0;
    });
  });
}

int break_lock(const std::vector<std::string>& args) {
  arg_cursor a(args);
  common_options common;
  bool yes = false;
  while (a.at_option()) {
    if (common.parse(a)) continue;
    if (a.option("--yes") || a.option("-y")) {
      yes = true;
    } else {
      unknown_option("break", a.peek());
    }
  }
  if (!a.done() && a.peek() == "--") a.take();
  std::vector<std::string> names = a.rest();
  if (names.size() != 1) throw usage_error("break: want exactly one NAME (usage: redislock break [--yes] NAME)");
  common.finish();
  const std::string name = checked_name(names[0], common.lock);
  if (!yes && ::isatty(STDIN_FILENO))
    throw usage_error("break takes '" + name + "' away from whoever holds it; confirm with --yes");
  redislock::lock_info removed;
  common.with_client([&](auto& client) {
    removed = redislock::force_release(client, name, common.lock);
    return 0;
  });
  if (!removed.held()) {
    std::fputs(text(removed).c_str(), stdout);
    say(removed.kind == redislock::lock_kind::foreign ? "'" + name + "' is not a lock: left alone"
        : removed.kind == redislock::lock_kind::latch
            ? "'" + name + "' is a latch (nobody holds it): left alone; it ends with its lease"
            : "'" + name + "' is free: nothing removed");
    return 1;
  }
  std::string out = "removed " + text(removed);
  if (removed.waiters <= 0) {
    out += "  nobody was waiting\n";
  } else if (removed.kind == redislock::lock_kind::shared) {
    out += "  handed to the head of its queue (a writer, or the readers up to the first writer)\n";
  } else {
    out += "  handed to the longest waiting live waiter\n";
  }
  std::fputs(out.c_str(), stdout);
  return 0;
}

int dispatch(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) throw usage_error("missing subcommand: run, elect, status, top or break (see 'redislock --help')");
  const std::string sub = args[0];
  args.erase(args.begin());
  if (sub == "--help" || sub == "-h" || sub == "help") {
    const std::string topic = args.empty() ? "" : args[0];
    std::fputs(topic == "run"      ? run_help()
               : topic == "elect"  ? elect_help()
               : topic == "status" ? status_help()
               : topic == "top"    ? top_help()
               : topic == "break"  ? break_help()
                                   : main_help(),
               stdout);
    return 0;
  }
  if (sub == "--version") {
    std::printf("redislock %d.%d.%d\n", REDISLOCK_VERSION_MAJOR, REDISLOCK_VERSION_MINOR, REDISLOCK_VERSION_PATCH);
    return 0;
  }
  const char* help = sub == "run"      ? run_help()
                     : sub == "elect"  ? elect_help()
                     : sub == "status" ? status_help()
                     : sub == "top"    ? top_help()
                     : sub == "break"  ? break_help()
                                       : nullptr;
  if (help == nullptr)
    throw usage_error("unknown subcommand '" + sub +
                      "': want run, elect, status, top or break (see 'redislock --help')");
  if (wants_help(args)) {
    std::fputs(help, stdout);
    return 0;
  }
  if (sub == "run" || sub == "elect") return run(args, sub);
  if (sub == "status") return status(args);
  if (sub == "top") return top(args);
  return break_lock(args);
}

}  // namespace
}  // namespace redislock_cli

int main(int argc, char** argv) {
  using namespace redislock_cli;
  try {
    return dispatch(argc, argv);
  } catch (const usage_error& e) {
    say(e.what());
    return exit_usage;
  } catch (const redislock::wrong_type_error& e) {
    say(e.what());  // names the lock, the kind that holds it and the kind asked for
    return exit_unavailable;
  } catch (const redislock::connection_error& e) {
    say(std::string("cannot reach Redis: ") + e.what());
    return exit_unavailable;
  } catch (const redislock::error& e) {
    say(std::string("Redis refused: ") + e.what());
    return exit_unavailable;
  } catch (const std::exception& e) {
    say(std::string("error: ") + e.what());
    return exit_unavailable;
  }
}
