// Benchmarks of redislock::mutex (and, uncontended, of reentrant_mutex, shared_mutex and a
// 3-server redlock; contended, of every kind: BM_kind_contended, issue 16) against a
// raw-hiredis baseline doing the same round trips (SET NX PX to acquire, EVALSHA
// compare-and-delete to release), measured in the same process and run. Starts its own
// redis-server (tests/harness/redis_server.hpp).
//
//   bench_mutex [google-benchmark flags]     REDISLOCK_BENCH_SECONDS=2 sets the length of
//                                             each contended run (default 2 s)
//   bench_mutex --contender ...              internal: one contending process (see below)
//
// Counters (all in the JSON output):
//   *_us               medians in microseconds (lib_p99_us: 99th percentile);
//                      speed_vs_raw = raw time / redislock time
//   cmds_per_op        uncontended cases: commands sent per lock+unlock cycle, counted the
//                      same way as cmds_per_acq (raw_cmds_per_op: the baseline's, 2)
//   gap_*_us           hand-off gap: from the holder calling unlock() to the next holder's
//                      lock() returning (includes the release's own round trip);
//                      gap_vs_rtt = gap p50 / PING round trip p50 (rtt_us: PINGs sampled
//                      during the run from a thread sleeping between them, as waiters do;
//                      rtt_loop_us: back-to-back PINGs before the run;
//                      rtt_after_hold_us: PINGs each sent right after spinning for the hold,
//                      as the release is, before the run; gap_vs_rtt_after_hold uses it)
//   raw_handoff_us     the same hand-off by a notified lock written on raw hiredis (release
//                      script with PUBLISH; the woken waiter sends SET NX PX), after the same
//                      hold, before the run; gap_vs_raw_handoff = gap p50 / its p50.
//                      raw_notice_us: its message alone (release sent -> waiter woken), the
//                      floor of any notified hand-off on this machine
//   overlaps           acquisitions that began before the previous holder called unlock()
//                      (must be 0: mutual exclusion)
//   acq_per_s, tput_vs_hold = acquisitions/s x hold (1.0 = the lock never idles)
//   share_min/max      each contender's acquisitions / the fair share (1.0 = perfectly fair)
//   wait_p99_vs_hold   p99 of the time a lock() call waited, in units of the hold time
//   cmds_per_acq       commands the clients sent per acquisition, counted through MONITOR
//                      (calls inside scripts left out) in a second pass of half the length
#include "bench_support.hpp"
#include "process.hpp"
#include "redis_server.hpp"
#if defined(REDISLOCK_WITH_TLS) && HIREDIS_MAJOR >= 1
#include "tls_certificates.hpp"
#endif

#include <redislock/observe/prometheus.hpp>
#include <redislock/redislock.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace redislock;
using namespace redislock_bench;
using redislock_test::child_process;
using redislock_test::redis_server;
using clk = std::chrono::steady_clock;
using std::chrono::microseconds;
using std::chrono::nanoseconds;

namespace {

client_options options() { return options_for(g_server->port()); }

/// Rounds of a measurement made after spinning for `hold`: about 0.3 s of holds, 30..2000.
int rounds_for(nanoseconds hold) {
  return hold.count() == 0 ? 2000 : static_cast<int>(std::clamp(300'000'000 / hold.count(), 30L, 2000L));
}

/// A single PING as a releasing holder sends its release: right after spinning for `hold`.
/// On a VM, a command after a long idle or busy stretch pays wake-ups a back-to-back one does
/// not; this is the like-for-like baseline for the release inside a hand-off.
double rtt_after_hold_p50_us(raw_lock& raw, nanoseconds hold) {
  const int n = rounds_for(hold);
  std::vector<double> s;
  for (int i = 0; i < n; ++i) {
    spin_for(hold);
    auto t0 = clk::now();
    raw.ping();
    s.push_back(std::chrono::duration<double, std::micro>(clk::now() - t0).count());
  }
  return percentile(s, 0.5);
}

// A notified lock written by hand on raw hiredis (raw_handoff, contend_raw): its connections,
// its commands, its release.
using raw_context = std::unique_ptr<redisContext, void (*)(redisContext*)>;
raw_context raw_connect(int port) {
  redisContext* c = redisConnect("127.0.0.1", port);
  if (c == nullptr || c->err) throw std::runtime_error("raw notified lock: cannot connect");
  return raw_context(c, redisFree);
}
reply_ptr raw_run(redisContext* c, std::initializer_list<const char*> argv) {
  std::vector<const char*> v(argv);
  reply_ptr r(static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(v.size()), v.data(), nullptr)));
  if (!r || r->type == REDIS_REPLY_ERROR) throw std::runtime_error("raw notified lock: command failed");
  return r;
}
// The raw notified lock's release: compare-and-delete, then PUBLISH to the waiters' channel.
constexpr const char* kRawRelease =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) "
    "redis.call('PUBLISH', KEYS[2], ARGV[1]) return 1 end return 0";

/// The hand-off of a notified lock written by hand on raw hiredis, doing the round trips such
/// a lock makes: the holder releases with one script (compare-and-delete, then PUBLISH), and
/// the waiter, blocked on its SUBSCRIBEd connection, is woken by the message and takes the
/// lock with SET NX PX. Timed from the holder sending its release (right after spinning for
/// `hold`, as in the contended runs) to the message reaching the waiter (notice_us: the floor
/// of any notified hand-off, one message from a client to another through the server) and to
/// the waiter's SET returning (handoff_us).
struct raw_handoff_p50 {
  double notice_us = 0, handoff_us = 0;
};
raw_handoff_p50 raw_handoff(int port, nanoseconds hold) {
  auto holder = raw_connect(port), waiter = raw_connect(port), listener = raw_connect(port);
  raw_run(listener.get(), {"SUBSCRIBE", "raw:handoff:channel"});
  const int rounds = rounds_for(hold);
  std::atomic<int> ready{0};             // the round the waiter is ready for (1-based)
  std::atomic<std::int64_t> sent_ns{0};  // when the holder sent this round's release
  std::vector<double> notice, handoff;
  std::thread w([&] {
    for (int i = 0; i < rounds; ++i) {
      ready.store(i + 1);
      void* raw = nullptr;
      if (redisGetReply(listener.get(), &raw) != REDIS_OK) throw std::runtime_error("raw_handoff: no message");
      freeReplyObject(raw);
      const std::int64_t noticed = now_ns();
      if (raw_run(waiter.get(), {"SET", "raw:handoff", "waiter", "NX", "PX", "30000"})->type != REDIS_REPLY_STATUS)
        throw std::runtime_error("raw_handoff: the lock was not free");
      const std::int64_t acquired = now_ns();
      notice.push_back(static_cast<double>(noticed - sent_ns.load()) / 1e3);
      handoff.push_back(static_cast<double>(acquired - sent_ns.load()) / 1e3);
      raw_run(waiter.get(), {"DEL", "raw:handoff"});
    }
  });
  for (int i = 0; i < rounds; ++i) {
    while (ready.load() != i + 1) std::this_thread::yield();
    raw_run(holder.get(), {"SET", "raw:handoff", "holder", "NX", "PX", "30000"});
    spin_for(hold);
    sent_ns.store(now_ns());
    raw_run(holder.get(), {"EVAL", kRawRelease, "2", "raw:handoff", "raw:handoff:channel", "holder"});
  }
  w.join();
  return {percentile(notice, 0.5), percentile(handoff, 0.5)};
}

/// Counts the commands that clients send to the server, through MONITOR: a line per command,
/// where the calls made inside scripts are marked "lua" and left out, so what is counted is
/// what crossed the network. (INFO commandstats and total_commands_processed count the calls
/// inside scripts too.) Only used in counting passes: MONITOR slows the server down.
class command_counter {
 public:
  explicit command_counter(int port) : c_(redisConnect("127.0.0.1", port)) {
    if (c_ == nullptr || c_->err) throw std::runtime_error("command_counter: cannot connect");
    reply_ptr ok(static_cast<redisReply*>(redisCommand(c_, "MONITOR")));
    if (!ok || ok->type != REDIS_REPLY_STATUS) throw std::runtime_error("command_counter: MONITOR refused");
    const timeval poll_every{0, 50'000};
    redisSetTimeout(c_, poll_every);
    reader_ = std::thread([this] {
      while (!stop_.load()) {
        void* raw = nullptr;
        if (redisGetReply(c_, &raw) != REDIS_OK) {
          if (c_->err != REDIS_ERR_IO || (errno != EAGAIN && errno != EWOULDBLOCK)) break;
          c_->err = 0;  // a read timeout: look at stop_ and go on
          continue;
        }
        reply_ptr line(static_cast<redisReply*>(raw));
        if (line->type != REDIS_REPLY_STATUS || std::strstr(line->str, " lua] ") != nullptr) continue;
        if (std::strstr(line->str, kMarker) != nullptr) {
          ++markers_;
        } else {
          ++count_;
        }
      }
    });
  }
  ~command_counter() {
    stop_ = true;
    reader_.join();
    redisFree(c_);
  }
  command_counter(const command_counter&) = delete;
  command_counter& operator=(const command_counter&) = delete;

  /// Commands counted so far: all that the server ran before a marker command sent now
  /// (MONITOR lines arrive in execution order; the marker itself is not counted).
  long long until_now(connection& admin) {
    const long long before = markers_.load();
    admin.command({"ECHO", kMarker});
    const auto limit = clk::now() + std::chrono::seconds(10);
    while (markers_.load() == before && clk::now() < limit) std::this_thread::sleep_for(microseconds(200));
    return count_.load();
  }

 private:
  static constexpr const char* kMarker = "command-counter-marker";
  redisContext* c_;
  std::atomic<bool> stop_{false};
  std::atomic<long long> count_{0}, markers_{0};
  std::thread reader_;
};

/// Single-command round trips (PING p50) sampled while a contended run goes on, from a thread
/// that sleeps between pings, as the waiters do: the same machine load and the same wake-ups
/// as the hand-offs it is compared with. (rtt_loop_us: PINGs back to back on an idle machine.)
class rtt_sampler {
 public:
  rtt_sampler(int port, std::int64_t start_ns, std::int64_t end_ns)
      : thread_([this, port, start_ns, end_ns] {
          raw_lock raw(port);
          while (now_ns() < start_ns) std::this_thread::sleep_for(microseconds(100));
          while (now_ns() < end_ns) {
            std::this_thread::sleep_for(microseconds(2000));
            auto t0 = clk::now();
            raw.ping();
            samples_.push_back(std::chrono::duration<double, std::micro>(clk::now() - t0).count());
          }
        }) {}
  /// Joins; the p50.
  double finish() {
    thread_.join();
    return percentile(samples_, 0.5);
  }

 private:
  std::vector<double> samples_;
  std::thread thread_;
};

// ---------------------------------------------------------------------------------------
// Uncontended and failing attempts, interleaved with the baseline in every iteration.

// Runs the cycles one after the other in every iteration (after one warm-up call of each:
// connections and scripts), so that all see the same load; the iteration's time is the first
// one's. Returns each cycle's samples in microseconds.
template <class... Cycles>
std::array<std::vector<double>, sizeof...(Cycles)> interleaved(benchmark::State& state, Cycles&&... cycles) {
  (cycles(), ...);
  std::array<std::vector<double>, sizeof...(Cycles)> samples;
  for (auto _ : state) {
    std::size_t i = 0;
    auto timed = [&](auto& cycle) {
      const auto t0 = clk::now();
      cycle();
      samples[i++].push_back(std::chrono::duration<double, std::micro>(clk::now() - t0).count());
    };
    (timed(cycles), ...);
    state.SetIterationTime(samples[0].back() / 1e6);
  }
  return samples;
}

// One uncontended cycle of a lock kind (lib_cycle) against the raw baseline's SET NX PX +
// EVALSHA compare-and-delete, interleaved in every iteration so that both see the same load.
// Then a counting pass of each alone: server commands per cycle (INFO commandstats).
template <class Cycle>
void uncontended(benchmark::State& state, Cycle&& lib_cycle) {
  raw_lock raw(g_server->port());
  const std::string raw_key = "raw:uncontended", token = "0123456789abcdef0123456789abcdef";
  auto raw_cycle = [&] { raw.lock(raw_key, token), raw.unlock(raw_key, token); };
  auto same_script_cycle = [&] { raw.lock_same_commands(raw_key, token), raw.unlock_same_commands(raw_key, token); };
  const auto [lib, base, same] = interleaved(state, lib_cycle, raw_cycle, same_script_cycle);
  state.counters["lib_us"] = percentile(lib, 0.5);
  state.counters["lib_p99_us"] = percentile(lib, 0.99);
  state.counters["raw_us"] = percentile(base, 0.5);
  state.counters["speed_vs_raw"] = percentile(base, 0.5) / percentile(lib, 0.5);
  // Raw hiredis sending the mutex's own commands: what they cost on the server, without any
  // redislock client code.
  state.counters["raw_same_cmds_us"] = percentile(same, 0.5);
  connection admin = g_server->admin();
  constexpr int counted = 200;
  auto commands_per_cycle = [&](auto&& cycle) {
    command_counter commands(g_server->port());
    const long long before = commands.until_now(admin);
    for (int i = 0; i < counted; ++i) cycle();
    return static_cast<double>(commands.until_now(admin) - before) / counted;
  };
  state.counters["cmds_per_op"] = commands_per_cycle(lib_cycle);
  state.counters["raw_cmds_per_op"] = commands_per_cycle(raw_cycle);
}

void BM_uncontended_cycle(benchmark::State& state) {
  client c(options());
  mutex m(c, "uncontended");
  uncontended(state, [&] { m.lock(), m.unlock(); });
}
BENCHMARK(BM_uncontended_cycle)->UseManualTime();

// The cost of observing (observe.hpp): the same uncontended mutex cycle with no observer, a
// counting observer and the Prometheus collector installed, and the raw baseline, interleaved
// in every iteration (the observer is switched between the timed cycles).
//   none_us, counting_us, prometheus_us, raw_us   medians
//   counting_vs_none, prometheus_vs_none           median ratios (1.02 = 2 % slower)
//   *_vs_raw                                       raw time / that cycle's time
struct counting_observer : lock_observer {
  void on_attempt(const attempt_event&) override { attempts.fetch_add(1, std::memory_order_relaxed); }
  void on_acquired(const acquired_event&) override { acquired.fetch_add(1, std::memory_order_relaxed); }
  void on_released(const released_event&) override { released.fetch_add(1, std::memory_order_relaxed); }
  std::atomic<std::uint64_t> attempts{0}, acquired{0}, released{0};
};

void BM_observed_cycle(benchmark::State& state) {
  client c(options());
  mutex m(c, "observed");
  raw_lock raw(g_server->port());
  const std::string raw_key = "raw:observed", token = "0123456789abcdef0123456789abcdef";
  const std::shared_ptr<lock_observer> none, counting = std::make_shared<counting_observer>(),
                                             prometheus = std::make_shared<prometheus_collector>();
  const std::shared_ptr<lock_observer>* observers[] = {&none, &counting, &prometheus};
  std::array<std::vector<double>, 4> samples;
  auto timed = [](auto&& f) {
    const auto t0 = clk::now();
    f();
    return std::chrono::duration<double, std::micro>(clk::now() - t0).count();
  };
  for (const auto* o : observers) set_observer(*o), m.lock(), m.unlock();  // warm-up
  for (auto _ : state) {
    for (std::size_t i = 0; i < 3; ++i) {
      set_observer(*observers[i]);
      samples[i].push_back(timed([&] { m.lock(), m.unlock(); }));
    }
    set_observer(nullptr);
    samples[3].push_back(timed([&] { raw.lock(raw_key, token), raw.unlock(raw_key, token); }));
    state.SetIterationTime(samples[0].back() / 1e6);
  }
  const double none_us = percentile(samples[0], 0.5), counting_us = percentile(samples[1], 0.5),
               prometheus_us = percentile(samples[2], 0.5), raw_us = percentile(samples[3], 0.5);
  state.counters["none_us"] = none_us;
  state.counters["counting_us"] = counting_us;
  state.counters["prometheus_us"] = prometheus_us;
  state.counters["raw_us"] = raw_us;
  state.counters["counting_vs_none"] = counting_us / none_us;
  state.counters["prometheus_vs_none"] = prometheus_us / none_us;
  state.counters["none_vs_raw"] = raw_us / none_us;
  state.counters["counting_vs_raw"] = raw_us / counting_us;
  state.counters["prometheus_vs_raw"] = raw_us / prometheus_us;
}
BENCHMARK(BM_observed_cycle)->UseManualTime();

// The observers' own time per uncontended cycle (its three events: attempt, acquired,
// released), called directly: what an observer adds to a cycle, without the network's noise.
template <class Observer>
void BM_observer_events_per_cycle(benchmark::State& state) {
  Observer o;
  attempt_event attempt;
  acquired_event acquired;
  released_event released;
  attempt.name = acquired.name = released.name = "order:42";
  acquired.attempts = 1;
  acquired.wait = released.held = std::chrono::microseconds(40);
  for (auto _ : state) {
    o.on_attempt(attempt);
    o.on_acquired(acquired);
    o.on_released(released);
  }
}
BENCHMARK_TEMPLATE(BM_observer_events_per_cycle, counting_observer);
BENCHMARK_TEMPLATE(BM_observer_events_per_cycle, prometheus_collector);

void BM_uncontended_reentrant(benchmark::State& state) {
  client c(options());
  reentrant_mutex m(c, "uncontended-reentrant");
  uncontended(state, [&] { m.lock(), m.unlock(); });
}
BENCHMARK(BM_uncontended_reentrant)->UseManualTime();

// Nested to depth 2: every lock() and unlock() is a round trip (the count lives on the server).
void BM_uncontended_reentrant_nested(benchmark::State& state) {
  client c(options());
  reentrant_mutex m(c, "uncontended-nested");
  uncontended(state, [&] { m.lock(), m.lock(), m.unlock(), m.unlock(); });
}
BENCHMARK(BM_uncontended_reentrant_nested)->UseManualTime();

void BM_uncontended_shared_read(benchmark::State& state) {
  client c(options());
  shared_mutex m(c, "uncontended-shared");
  uncontended(state, [&] { m.lock_shared(), m.unlock_shared(); });
}
BENCHMARK(BM_uncontended_shared_read)->UseManualTime();

void BM_uncontended_shared_write(benchmark::State& state) {
  client c(options());
  shared_mutex m(c, "uncontended-shared");
  uncontended(state, [&] { m.lock(), m.unlock(); });
}
BENCHMARK(BM_uncontended_shared_write)->UseManualTime();

// Redlock over 3 local servers (this run's server and two more) against the single-server
// mutex cycle, interleaved in every iteration: redlock_vs_mutex = redlock time / mutex time.
void BM_uncontended_redlock_3(benchmark::State& state) {
  redis_server second, third;
  client a(options()), b(options_for(second.port())), c(options_for(third.port()));
  redlock r({a, b, c}, "uncontended-redlock");
  client single(options());
  mutex m(single, "uncontended-vs-redlock");
  const auto [red, mut] = interleaved(
      state, [&] { r.lock(), r.unlock(); }, [&] { m.lock(), m.unlock(); });
  state.counters["redlock_us"] = percentile(red, 0.5);
  state.counters["redlock_p99_us"] = percentile(red, 0.99);
  state.counters["mutex_us"] = percentile(mut, 0.5);
  state.counters["redlock_vs_mutex"] = percentile(red, 0.5) / percentile(mut, 0.5);
}
BENCHMARK(BM_uncontended_redlock_3)->UseManualTime();

#if defined(REDISLOCK_WITH_TLS) && HIREDIS_MAJOR >= 1
// The mutex's uncontended cycle over TLS against the same cycle over plain TCP, both to one
// redis-server (its TLS port and its plain port), interleaved in every iteration:
// tls_vs_tcp = TLS time / TCP time (medians). Certificates made by the openssl CLI; the
// server's name (127.0.0.1) is verified as in any TLS connection.
void BM_uncontended_cycle_tls(benchmark::State& state) {
  redislock_test::tls_certificates certs;
  const int tls_port = redislock_test::free_port();
  redis_server server(certs.server_args(tls_port));
  client_options tls_options = options_for(tls_port);
  tls_options.connection.tls = true;
  tls_options.connection.tls_ca_file = certs.file("ca.crt");
  client tls_client(tls_options), tcp_client(options_for(server.port()));
  mutex over_tls(tls_client, "uncontended-tls"), over_tcp(tcp_client, "uncontended-tcp");
  const auto [tls, tcp] = interleaved(
      state, [&] { over_tls.lock(), over_tls.unlock(); }, [&] { over_tcp.lock(), over_tcp.unlock(); });
  state.counters["tls_us"] = percentile(tls, 0.5);
  state.counters["tls_p99_us"] = percentile(tls, 0.99);
  state.counters["tcp_us"] = percentile(tcp, 0.5);
  state.counters["tls_vs_tcp"] = percentile(tls, 0.5) / percentile(tcp, 0.5);
}
BENCHMARK(BM_uncontended_cycle_tls)->UseManualTime();
#endif

void BM_failed_try_lock(benchmark::State& state) {
  client c(options());
  mutex holder(c, "failing"), m(c, "failing");
  raw_lock raw(g_server->port());
  holder.lock();
  const std::string token = "0123456789abcdef0123456789abcdef";
  m.try_lock();
  std::vector<double> lib, base;
  for (auto _ : state) {
    auto t0 = clk::now();
    if (m.try_lock()) state.SkipWithError("try_lock succeeded");
    auto t1 = clk::now();
    if (raw.lock(holder.key(), token)) state.SkipWithError("raw SET NX succeeded");
    auto t2 = clk::now();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    lib.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    base.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
  }
  holder.unlock();
  state.counters["lib_us"] = percentile(lib, 0.5);
  state.counters["raw_us"] = percentile(base, 0.5);
  state.counters["speed_vs_raw"] = percentile(base, 0.5) / percentile(lib, 0.5);
}
BENCHMARK(BM_failed_try_lock)->UseManualTime();

// ---------------------------------------------------------------------------------------
// Contention on one key: N contenders, each with its own client and lock object.

struct event {
  int who;
  std::int64_t called, acquired, releasing;  // ns, steady clock (CLOCK_MONOTONIC: all processes)
};

// One contender's loop: lock, hold (spinning, so the hold is exact), unlock, again at once.
std::vector<event> contend(int port, const std::string& name, int who, nanoseconds hold, bool fair,
                           std::int64_t start_ns, std::int64_t end_ns) {
  client c(options_for(port));
  lock_options o;
  o.fair = fair;
  mutex m(c, name, o);
  std::vector<event> out;
  out.reserve(4096);
  while (now_ns() < start_ns) std::this_thread::sleep_for(microseconds(100));
  while (now_ns() < end_ns) {
    event e{who, now_ns(), 0, 0};
    m.lock();
    e.acquired = now_ns();
    spin_for(hold);
    e.releasing = now_ns();
    m.unlock();
    out.push_back(e);
  }
  return out;
}

void report_contention(benchmark::State& state, std::vector<event> events, int contenders, nanoseconds hold,
                       double seconds, double commands_per_acquisition, double rtt_us, double rtt_loop_us,
                       double rtt_after_hold_us, raw_handoff_p50 raw) {
  std::sort(events.begin(), events.end(), [](const event& a, const event& b) { return a.acquired < b.acquired; });
  std::vector<double> gaps, waits;
  double overlaps = 0;
  for (std::size_t i = 1; i < events.size(); ++i) {
    gaps.push_back(static_cast<double>(events[i].acquired - events[i - 1].releasing) / 1e3);
    if (events[i].acquired < events[i - 1].releasing) ++overlaps;
  }
  state.counters["overlaps"] = overlaps;
  for (const auto& e : events) waits.push_back(static_cast<double>(e.acquired - e.called));
  std::vector<double> per(contenders, 0);
  for (const auto& e : events) per[e.who] += 1;
  const double fair_share = static_cast<double>(events.size()) / contenders;
  const double n = static_cast<double>(events.size());
  state.counters["acquisitions"] = n;
  state.counters["acq_per_s"] = n / seconds;
  state.counters["tput_vs_hold"] = n / seconds * std::chrono::duration<double>(hold).count();
  state.counters["gap_p50_us"] = percentile(gaps, 0.5);
  state.counters["gap_p99_us"] = percentile(gaps, 0.99);
  state.counters["rtt_us"] = rtt_us;
  state.counters["rtt_loop_us"] = rtt_loop_us;
  state.counters["rtt_after_hold_us"] = rtt_after_hold_us;
  state.counters["gap_vs_rtt_after_hold"] = percentile(gaps, 0.5) / rtt_after_hold_us;
  state.counters["gap_vs_rtt"] = percentile(gaps, 0.5) / rtt_us;
  state.counters["raw_notice_us"] = raw.notice_us;
  state.counters["raw_handoff_us"] = raw.handoff_us;
  state.counters["gap_vs_raw_handoff"] = percentile(gaps, 0.5) / raw.handoff_us;
  state.counters["share_min"] = *std::min_element(per.begin(), per.end()) / fair_share;
  state.counters["share_max"] = *std::max_element(per.begin(), per.end()) / fair_share;
  if (hold.count() > 0)
    state.counters["wait_p99_vs_hold"] = percentile(waits, 0.99) / static_cast<double>(hold.count());
  state.counters["wait_p99_us"] = percentile(waits, 0.99) / 1e3;
  state.counters["cmds_per_acq"] = commands_per_acquisition;
}

// Args: contenders, hold in microseconds, fair (0/1).
// One contended run between two instants (steady clock, ns): all contenders' events.
using contended_run = std::function<std::vector<event>(std::int64_t start_ns, std::int64_t end_ns)>;

// The timed run (with RTT sampling), then a counting pass of half its length under MONITOR
// (which slows the server, so it is kept out of the timed run).
void measure_contention(benchmark::State& state, const contended_run& run, int n, nanoseconds hold,
                        std::int64_t warm_up_ns) {
  const double seconds = seconds_per_run();
  raw_lock raw(g_server->port());
  connection admin = g_server->admin();
  for (auto _ : state) {
    // Back-to-back PINGs are the no-hold case of the same measurement.
    const double rtt_loop = rtt_after_hold_p50_us(raw, nanoseconds(0));
    const double rtt_after_hold = hold.count() == 0 ? rtt_loop : rtt_after_hold_p50_us(raw, hold);
    const raw_handoff_p50 raw_baseline = raw_handoff(g_server->port(), hold);
    std::int64_t start = now_ns() + warm_up_ns, end = start + static_cast<std::int64_t>(seconds * 1e9);
    rtt_sampler rtt(g_server->port(), start, end);
    std::vector<event> timed = run(start, end);
    const double rtt_us = rtt.finish();
    double commands_per_acquisition = 0;
    {
      command_counter counter(g_server->port());
      const long long before = counter.until_now(admin);
      start = now_ns() + warm_up_ns, end = start + static_cast<std::int64_t>(seconds / 2 * 1e9);
      const std::size_t acquisitions = run(start, end).size();
      commands_per_acquisition =
          static_cast<double>(counter.until_now(admin) - before) / static_cast<double>(acquisitions);
    }
    state.SetIterationTime(seconds);
    report_contention(state, std::move(timed), n, hold, seconds, commands_per_acquisition, rtt_us, rtt_loop,
                      rtt_after_hold, raw_baseline);
  }
}

// Args: contenders, hold in microseconds, fair (0/1).
void BM_contended_threads(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const nanoseconds hold = microseconds(state.range(1));
  const bool fair = state.range(2) != 0;
  const std::string name = "threads-" + std::to_string(n) + (fair ? "-fair" : "");
  auto run = [&](std::int64_t start, std::int64_t end) {
    std::vector<std::vector<event>> results(n);
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i)
      threads.emplace_back([&, i] { results[i] = contend(g_server->port(), name, i, hold, fair, start, end); });
    for (auto& t : threads) t.join();
    std::vector<event> all;
    for (auto& r : results) all.insert(all.end(), r.begin(), r.end());
    return all;
  };
  measure_contention(state, run, n, hold, 200'000'000);
}
BENCHMARK(BM_contended_threads)
    ->ArgNames({"n", "hold_us", "fair"})
    ->Args({2, 0, 0})
    ->Args({8, 2000, 0})
    ->Args({8, 2000, 1})
    ->Args({2, 20000, 0})
    ->Args({2, 20000, 1})
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// The same with N processes: each contender is this program run with --contender.
void BM_contended_processes(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const long hold_us = static_cast<long>(state.range(1));
  const bool fair = state.range(2) != 0;
  auto run = [&](std::int64_t start, std::int64_t end) {
    std::vector<child_process> children;
    std::vector<int> pipes;
    for (int i = 0; i < n; ++i) {
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
      children.emplace_back(std::vector<std::string>{g_self, "--contender", std::to_string(g_server->port()),
                                                     "procs-" + std::to_string(n) + (fair ? "-fair" : ""),
                                                     std::to_string(i), std::to_string(hold_us), fair ? "1" : "0",
                                                     std::to_string(start), std::to_string(end)},
                            fds[1]);
      ::close(fds[1]);
      pipes.push_back(fds[0]);
    }
    std::vector<event> all;
    for (int i = 0; i < n; ++i) {
      std::string text;
      char buf[65536];
      for (ssize_t got; (got = ::read(pipes[i], buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(got));
      ::close(pipes[i]);
      if (children[i].wait_for(std::chrono::seconds(60)) != 0) throw std::runtime_error("a contender failed");
      std::istringstream in(text);
      event e{};
      while (in >> e.who >> e.called >> e.acquired >> e.releasing) all.push_back(e);
    }
    return all;
  };
  measure_contention(state, run, n, microseconds(hold_us), 500'000'000);
}
BENCHMARK(BM_contended_processes)
    ->ArgNames({"n", "hold_us", "fair"})
    ->Args({4, 2000, 0})
    ->Args({4, 2000, 1})
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------------------
// N threads on N keys (no contention): aggregate cycles/s (sum of two runs each), against
// raw threads on raw keys.

void BM_threads_own_keys(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const double seconds = seconds_per_run() / 4;
  for (auto _ : state) {
    auto run = [&](bool lib) {
      std::atomic<long long> cycles{0};
      std::vector<std::thread> threads;
      const auto end = clk::now() + std::chrono::duration<double>(seconds);
      for (int i = 0; i < n; ++i)
        threads.emplace_back([&, i] {
          long long local = 0;
          const std::string name = "own-" + std::to_string(i);
          if (lib) {
            client c(options());
            mutex m(c, name);
            while (clk::now() < end) m.lock(), m.unlock(), ++local;
          } else {
            raw_lock raw(g_server->port());
            const std::string key = "raw:" + name, token = "0123456789abcdef0123456789abcdef";
            while (clk::now() < end) raw.lock(key, token), raw.unlock(key, token), ++local;
          }
          cycles += local;
        });
      for (auto& t : threads) t.join();
      return static_cast<double>(cycles.load()) / seconds;
    };
    // raw, lib, lib, raw: a load change on the machine hits both sides alike.
    double base = run(false), lib = run(true);
    lib += run(true);
    base += run(false);
    state.SetIterationTime(4 * seconds);
    state.counters["lib_cycles_per_s"] = lib;
    state.counters["raw_cycles_per_s"] = base;
    state.counters["speed_vs_raw"] = lib / base;
  }
}
BENCHMARK(BM_threads_own_keys)
    ->ArgName("n")
    ->Arg(1)
    ->Arg(4)
    ->Arg(16)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------------------
// Every lock kind under the same contention (issue 16; run last, so the cases above keep the
// conditions their README figures were measured in): 8 clients (threads, each with its own
// client and lock object) on one name, lock, hold, unlock, again at once; next to a raw
// hiredis lock measured in the same benchmark (half its run before the lock kind's, half after).
// One template over a small kind struct: the mutex, the reentrant mutex, the shared mutex's
// writers (all 8 take lock()), and a shared mutex mix of 6 readers and 2 writers.
//
// The raw baseline is a notified lock written by hand: SET NX PX to acquire; when that fails
// the waiter blocks on its own SUBSCRIBEd connection (100 ms read timeout) and tries again on
// any message; the release is one EVAL (compare-and-delete, then PUBLISH), so every waiter
// wakes and races (no queue, no fairness; a message left from an earlier release costs one
// failed SET more).
//
// Writers hold by spinning (exact holds, as BM_contended_threads); readers sleep their hold
// (six readers spinning at once would take both cores from the server and the writers).
// Contenders wait with try_lock_for / try_lock_shared_for (20 s): lock()'s wait with a
// deadline, so that a stranded waiter fails the case instead of hanging the run.
//
// Counters:
//   acq_per_s, raw_acq_per_s, acq_vs_raw   acquisitions per second (both sides of the mix
//                                          summed), and the ratio to the raw lock's
//   read_acq_per_s, write_acq_per_s, read_vs_raw, write_vs_raw   the mix: each side alone
//   tput_vs_hold        acquisitions/s x hold, exclusive kinds only (1.0 = the lock never idles)
//   gap_p50_us, gap_p99_us   hand-off gap: from the last hold's end (its holder about to call
//                       unlock/unlock_shared) to the next acquisition made while nothing was
//                       held (lock() returned); for exclusive kinds, every acquisition
//   raw_gap_p50_us, gap_vs_raw   the raw lock's, and gap p50 / raw gap p50
//   share_min, share_max     smallest and largest per-client acquisitions / the mean of its side
//                       (readers and writers apart in the mix); fair_20pct = 1 when all are
//                       within [0.8, 1.2] (issue 16's target in fair mode)
//   read_share_*, write_share_*   the mix: each side's
//   wait_p99_us         99th percentile of the time a lock call waited
//   server_cmds_per_acq, raw_server_cmds_per_acq   server commands per acquisition by INFO
//                       commandstats over the timed run (the calls made inside scripts
//                       included, unlike bench_mutex's MONITOR count cmds_per_acq)
//   scripts_per_acq     EVALSHA calls per acquisition
//   overlaps            holds that overlapped where the kind forbids it (must be 0)

// A kind: the lock type, and how many of the contenders (0..readers-1) take read holds.
template <class Lock, int Readers = 0>
struct kind {
  using lock_type = Lock;
  static constexpr int readers = Readers;
  /// Waits as lock()/lock_shared() do, but gives up after `bound` (a stuck lock fails the
  /// benchmark instead of hanging it).
  static bool lock(Lock& m, bool read, std::chrono::seconds bound) {
    if constexpr (Readers > 0) {
      if (read) return m.try_lock_shared_for(bound);
    }
    return m.try_lock_for(bound);
  }
  static void unlock(Lock& m, bool read) {
    if constexpr (Readers > 0) {
      if (read) return m.unlock_shared();
    }
    m.unlock();
  }
};
using mutex_kind = kind<mutex>;
using reentrant_kind = kind<reentrant_mutex>;
using shared_writers_kind = kind<shared_mutex>;
using shared_6r2w_kind = kind<shared_mutex, 6>;

// A writer's hold spins; a reader's sleeps (see above).
void hold_for(nanoseconds hold, bool read) {
  if (read && hold.count() > 0) {
    std::this_thread::sleep_for(hold);
  } else {
    spin_for(hold);
  }
}

std::atomic<int> g_stuck_contenders{0};  // contenders whose lock call gave up (see kind::lock)

template <class Kind>
std::vector<event> contend_kind(int port, const std::string& name, int who, nanoseconds hold, bool fair,
                                std::int64_t start_ns, std::int64_t end_ns) {
  client c(options_for(port));
  lock_options o;
  o.fair = fair;
  typename Kind::lock_type m(c, name, o);
  const bool read = who < Kind::readers;
  std::vector<event> out;
  out.reserve(4096);
  while (now_ns() < start_ns) std::this_thread::sleep_for(microseconds(100));
  while (now_ns() < end_ns) {
    event e{who, now_ns(), 0, 0};
    if (!Kind::lock(m, read, std::chrono::seconds(20))) {
      ++g_stuck_contenders;
      break;
    }
    e.acquired = now_ns();
    hold_for(hold, read);
    e.releasing = now_ns();
    Kind::unlock(m, read);
    out.push_back(e);
  }
  return out;
}

// The raw notified lock (see above): one contender's loop.
std::vector<event> contend_raw(int port, const std::string& key, int who, nanoseconds hold, std::int64_t start_ns,
                               std::int64_t end_ns) {
  auto commands = raw_connect(port), listener = raw_connect(port);
  const std::string channel = key + ":channel", token = "raw-contender-" + std::to_string(who);
  raw_run(listener.get(), {"SUBSCRIBE", channel.c_str()});
  redisSetTimeout(listener.get(), timeval{0, 100'000});
  std::vector<event> out;
  out.reserve(4096);
  while (now_ns() < start_ns) std::this_thread::sleep_for(microseconds(100));
  while (now_ns() < end_ns) {
    event e{who, now_ns(), 0, 0};
    while (raw_run(commands.get(), {"SET", key.c_str(), token.c_str(), "NX", "PX", "30000"})->type !=
           REDIS_REPLY_STATUS) {
      void* message = nullptr;
      if (redisGetReply(listener.get(), &message) == REDIS_OK) {
        freeReplyObject(message);
      } else if (listener->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        listener->err = 0;  // read timeout: try again
      } else {
        throw std::runtime_error("contend_raw: subscription lost");
      }
    }
    e.acquired = now_ns();
    spin_for(hold);
    e.releasing = now_ns();
    raw_run(commands.get(), {"EVAL", kRawRelease, "2", key.c_str(), channel.c_str(), token.c_str()});
    out.push_back(e);
  }
  return out;
}

struct phase_calls {
  long long commands = 0, scripts = 0;  // all commands (calls inside scripts included), EVALSHAs
};

// Runs `contend(who, start, end)` on n threads after a 200 ms warm-up; all their events and
// the server's commands over the run (INFO commandstats before and after).
template <class Contend>
std::pair<std::vector<event>, phase_calls> run_contenders(int n, double seconds, Contend&& contend) {
  connection admin = g_server->admin();
  const std::int64_t start = now_ns() + 200'000'000, end = start + static_cast<std::int64_t>(seconds * 1e9);
  std::vector<std::vector<event>> results(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) threads.emplace_back([&, i] { results[i] = contend(i, start, end); });
  while (now_ns() < start) std::this_thread::sleep_for(microseconds(100));
  const server_sample s0 = sample(admin);
  for (auto& t : threads) t.join();
  const server_sample s1 = sample(admin);
  std::vector<event> all;
  for (auto& r : results) all.insert(all.end(), r.begin(), r.end());
  return {std::move(all), {s1.total() - s0.total(), s1.of("evalsha") - s0.of("evalsha")}};
}

/// Hand-off gaps (µs) and forbidden overlaps of events sorted by acquisition: a gap is from
/// the end of the holds so far to an acquisition made when none was left; a read may overlap
/// reads only (`is_read(who)`).
template <class IsRead>
std::pair<std::vector<double>, double> gaps_and_overlaps(std::vector<event>& events, IsRead&& is_read) {
  std::sort(events.begin(), events.end(), [](const event& a, const event& b) { return a.acquired < b.acquired; });
  std::vector<double> gaps;
  double overlaps = 0;
  std::int64_t any_end = 0, write_end = 0;  // latest end of any hold / of a write hold so far
  for (std::size_t i = 0; i < events.size(); ++i) {
    const event& e = events[i];
    const bool read = is_read(e.who);
    if (i > 0 && e.acquired >= any_end) gaps.push_back(static_cast<double>(e.acquired - any_end) / 1e3);
    if (e.acquired < (read ? write_end : any_end)) ++overlaps;
    any_end = std::max(any_end, e.releasing);
    if (!read) write_end = std::max(write_end, e.releasing);
  }
  return {std::move(gaps), overlaps};
}

// Args: contenders, hold in microseconds, fair (0/1).
template <class Kind>
void BM_kind_contended(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const nanoseconds hold = microseconds(state.range(1));
  const bool fair = state.range(2) != 0;
  const double seconds = seconds_per_run();
  const std::string name = "kinds-" + std::to_string(state.range(1)) + (fair ? "-fair" : "");
  auto is_read = [](int who) { return who < Kind::readers; };
  g_stuck_contenders = 0;
  for (auto _ : state) {
    auto raw_run = [&] {
      return run_contenders(n, seconds / 2, [&](int who, std::int64_t start, std::int64_t end) {
        return contend_raw(g_server->port(), "raw:" + name, who, hold, start, end);
      });
    };
    auto [raw_events, raw_calls] = raw_run();
    auto [events, calls] = run_contenders(n, seconds, [&](int who, std::int64_t start, std::int64_t end) {
      return contend_kind<Kind>(g_server->port(), name, who, hold, fair, start, end);
    });
    if (g_stuck_contenders.load() > 0) {
      state.SkipWithError("a contender waited 20 s for the lock");
      break;
    }
    auto [raw_after, raw_calls_after] = raw_run();
    // Each raw half's gaps apart: the time between the halves is no hand-off.
    auto raw_gaps = gaps_and_overlaps(raw_events, [](int) { return false; }).first;
    for (double g : gaps_and_overlaps(raw_after, [](int) { return false; }).first) raw_gaps.push_back(g);
    raw_events.insert(raw_events.end(), raw_after.begin(), raw_after.end());
    raw_calls.commands += raw_calls_after.commands;
    auto [gaps, overlaps] = gaps_and_overlaps(events, is_read);
    std::vector<double> per(n, 0), waits;
    for (const auto& e : events) per[e.who] += 1, waits.push_back(static_cast<double>(e.acquired - e.called) / 1e3);
    const double acq = static_cast<double>(events.size()), raw_acq = static_cast<double>(raw_events.size());
    const double acq_per_s = acq / seconds, raw_acq_per_s = raw_acq / seconds;
    state.SetIterationTime(seconds);
    state.counters["acquisitions"] = acq;
    state.counters["acq_per_s"] = acq_per_s;
    state.counters["raw_acq_per_s"] = raw_acq_per_s;
    state.counters["acq_vs_raw"] = acq_per_s / raw_acq_per_s;
    if (hold.count() > 0 && Kind::readers == 0)
      state.counters["tput_vs_hold"] = acq_per_s * std::chrono::duration<double>(hold).count();
    state.counters["gap_p50_us"] = percentile(gaps, 0.5);
    state.counters["gap_p99_us"] = percentile(gaps, 0.99);
    state.counters["raw_gap_p50_us"] = percentile(raw_gaps, 0.5);
    state.counters["gap_vs_raw"] = percentile(gaps, 0.5) / percentile(raw_gaps, 0.5);
    state.counters["overlaps"] = overlaps;
    state.counters["wait_p99_us"] = percentile(waits, 0.99);
    state.counters["server_cmds_per_acq"] = static_cast<double>(calls.commands) / acq;
    state.counters["raw_server_cmds_per_acq"] = static_cast<double>(raw_calls.commands) / raw_acq;
    state.counters["scripts_per_acq"] = static_cast<double>(calls.scripts) / acq;
    // Shares within each side: [0, readers) read, [readers, n) write.
    double share_min = 1e9, share_max = 0;
    auto side = [&](int from, int to, const char* prefix) {
      if (from >= to) return;
      double sum = 0;
      for (int i = from; i < to; ++i) sum += per[i];
      const double mean = sum / (to - from);
      const double lo = *std::min_element(per.begin() + from, per.begin() + to) / mean;
      const double hi = *std::max_element(per.begin() + from, per.begin() + to) / mean;
      share_min = std::min(share_min, lo), share_max = std::max(share_max, hi);
      if (Kind::readers == 0) return;
      const std::string p(prefix);
      state.counters[p + "_acq_per_s"] = sum / seconds;
      state.counters[p + "_vs_raw"] = sum / seconds / raw_acq_per_s;
      state.counters[p + "_share_min"] = lo;
      state.counters[p + "_share_max"] = hi;
    };
    side(0, std::min(Kind::readers, n), "read");
    side(std::min(Kind::readers, n), n, "write");
    state.counters["share_min"] = share_min;
    state.counters["share_max"] = share_max;
    state.counters["fair_20pct"] = share_min >= 0.8 && share_max <= 1.2 ? 1 : 0;
  }
}
#define REDISLOCK_KIND_BENCHMARK(kind)        \
  BENCHMARK_TEMPLATE(BM_kind_contended, kind) \
      ->ArgNames({"n", "hold_us", "fair"})    \
      ->Args({8, 0, 0})                       \
      ->Args({8, 2000, 0})                    \
      ->Args({8, 2000, 1})                    \
      ->Iterations(1)                         \
      ->UseManualTime()                       \
      ->Unit(benchmark::kMillisecond)
REDISLOCK_KIND_BENCHMARK(mutex_kind);
REDISLOCK_KIND_BENCHMARK(reentrant_kind);
REDISLOCK_KIND_BENCHMARK(shared_writers_kind);
REDISLOCK_KIND_BENCHMARK(shared_6r2w_kind);

// ---------------------------------------------------------------------------------------
// The semaphore: n contenders (each its own client and object) on one name of `permits`
// permits, each holding `hold` (a sleep: up to `permits` holders at once share 2 cores), then
// releasing and asking again at once. Counters:
//   acq_per_s, ideal_per_s   acquisitions per second, and permits / hold (every permit busy
//                            all the time); tput_vs_ideal = their ratio; hold_mean_us the holds
//                            made (a sleep overshoots), tput_vs_ideal_of_holds the ratio to them
//   gap_p50_us, gap_p99_us   from a release to the next acquisition while all permits were
//                            busy before it (the hand-off, the release's script to the waiter
//                            told on its channel)
//   share_min, share_max     smallest and largest per-client acquisitions / the mean;
//                            fair_20pct = 1 when all are within [0.8, 1.2]
//   server_cmds_per_acq, scripts_per_acq   server commands (inside scripts included, INFO
//                            commandstats) and EVALSHAs per acquisition
//   most_inside, beyond_n    the most holds seen at once, and acquisitions that made more than
//                            `permits` (must be 0)
std::vector<event> contend_semaphore(int port, const std::string& name, int who, std::int64_t permits, nanoseconds hold,
                                     bool fair, std::int64_t start_ns, std::int64_t end_ns) {
  client c(options_for(port));
  lock_options o;
  o.fair = fair;
  semaphore s(c, name, permits, o);
  std::vector<event> out;
  out.reserve(4096);
  while (now_ns() < start_ns) std::this_thread::sleep_for(microseconds(100));
  while (now_ns() < end_ns) {
    event e{who, now_ns(), 0, 0};
    if (!s.try_acquire_for(std::chrono::seconds(20))) {
      ++g_stuck_contenders;
      break;
    }
    e.acquired = now_ns();
    std::this_thread::sleep_for(hold);
    e.releasing = now_ns();
    s.release();
    out.push_back(e);
  }
  return out;
}

// Args: contenders, permits, hold in microseconds, fair (0/1).
void BM_semaphore_contended(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const std::int64_t permits = state.range(1);
  const nanoseconds hold = microseconds(state.range(2));
  const bool fair = state.range(3) != 0;
  const double seconds = seconds_per_run();
  const std::string name = "semaphore-" + std::to_string(permits) + (fair ? "-fair" : "");
  g_stuck_contenders = 0;
  for (auto _ : state) {
    auto [events, calls] = run_contenders(n, seconds, [&](int who, std::int64_t start, std::int64_t end) {
      return contend_semaphore(g_server->port(), name, who, permits, hold, fair, start, end);
    });
    if (g_stuck_contenders.load() > 0) {
      state.SkipWithError("a contender waited 20 s for a permit");
      break;
    }
    // Sweep the holds in time order: how many are inside, and the gap after each release
    // that left a permit free while all were busy before it.
    std::vector<std::pair<std::int64_t, int>> edges;  // (time, +1 acquire / -1 release)
    for (const auto& e : events) edges.emplace_back(e.acquired, +1), edges.emplace_back(e.releasing, -1);
    std::sort(edges.begin(), edges.end());  // a release before an acquisition at the same ns
    std::vector<double> gaps;
    std::int64_t inside = 0, most = 0, beyond = 0, freed_at = -1;
    for (const auto& [t, d] : edges) {
      if (d < 0) {
        if (inside == permits) freed_at = t;  // all were busy: a hand-off starts
        --inside;
        continue;
      }
      if (freed_at >= 0) gaps.push_back(static_cast<double>(t - freed_at) / 1e3), freed_at = -1;
      if (++inside > permits) ++beyond;
      most = std::max(most, inside);
    }
    std::vector<double> per(n, 0);
    double held_ns = 0;
    for (const auto& e : events) per[e.who] += 1, held_ns += static_cast<double>(e.releasing - e.acquired);
    const double acq = static_cast<double>(events.size()), mean = acq / n;
    const double hold_mean_s = held_ns / acq / 1e9;  // a sleep overshoots: the ideal of the holds made
    const double acq_per_s = acq / seconds,
                 ideal = static_cast<double>(permits) / std::chrono::duration<double>(hold).count();
    const double share_min = *std::min_element(per.begin(), per.end()) / mean;
    const double share_max = *std::max_element(per.begin(), per.end()) / mean;
    state.SetIterationTime(seconds);
    state.counters["acquisitions"] = acq;
    state.counters["acq_per_s"] = acq_per_s;
    state.counters["ideal_per_s"] = ideal;
    state.counters["tput_vs_ideal"] = acq_per_s / ideal;
    state.counters["hold_mean_us"] = hold_mean_s * 1e6;
    state.counters["tput_vs_ideal_of_holds"] = acq_per_s * hold_mean_s / static_cast<double>(permits);
    state.counters["gap_p50_us"] = percentile(gaps, 0.5);
    state.counters["gap_p99_us"] = percentile(gaps, 0.99);
    state.counters["share_min"] = share_min;
    state.counters["share_max"] = share_max;
    state.counters["fair_20pct"] = share_min >= 0.8 && share_max <= 1.2 ? 1 : 0;
    state.counters["server_cmds_per_acq"] = static_cast<double>(calls.commands) / acq;
    state.counters["scripts_per_acq"] = static_cast<double>(calls.scripts) / acq;
    state.counters["most_inside"] = static_cast<double>(most);
    state.counters["beyond_n"] = static_cast<double>(beyond);
  }
}
BENCHMARK(BM_semaphore_contended)
    ->ArgNames({"n", "permits", "hold_us", "fair"})
    ->Args({16, 4, 2000, 0})
    ->Args({16, 4, 2000, 1})
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// argv: --contender port name who hold_us fair start_ns end_ns
int contender_main(char** argv) {
  const int port = std::atoi(argv[2]);
  auto events = contend(port, argv[3], std::atoi(argv[4]), microseconds(std::atol(argv[5])), std::atoi(argv[6]) != 0,
                        std::atoll(argv[7]), std::atoll(argv[8]));
  std::string out;
  for (const auto& e : events)
    out += std::to_string(e.who) + ' ' + std::to_string(e.called) + ' ' + std::to_string(e.acquired) + ' ' +
           std::to_string(e.releasing) + '\n';
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return redislock_bench::bench_main(argc, argv, "--contender", 9, contender_main); }
