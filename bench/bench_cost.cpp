// Cost per lock operation (issue 17): client CPU, Redis server CPU and server commands per
// operation, each against a raw-hiredis lock measured in the same run (SET NX PX to acquire,
// EVALSHA compare-and-delete to release). Starts its own redis-server.
//
//   bench_cost [google-benchmark flags]      REDISLOCK_BENCH_SECONDS=2 sets each case's measured time
//   bench_cost --worker ...                  internal: one aggregate process (see below)
//
// Server figures come from the server itself: INFO cpu (used_cpu_user + used_cpu_sys) and
// INFO commandstats (every command, the calls made inside scripts included) before and after
// a phase, divided by the phase's operations. Client CPU comes from getrusage. Both are CPU
// time, not wall time, so the other load on the machine moves them little.
//
// Counters (ratios are to the raw baseline measured in the same benchmark):
//   client_cpu_us, raw_client_cpu_us, client_cpu_vs_raw    client CPU per cycle
//   server_cpu_us, raw_server_cpu_us                        server CPU per operation
//   server_cpu_vs_raw_cycle   server CPU per operation / server CPU of one raw uncontended cycle
//                             (contended, renewals: the median of 20 blocks of 400 raw cycles,
//                             half before the case's phases and half after)
//   server_cpu_vs_paced_raw_cycle   contended: the same against raw cycles made at the pace of
//                             the acquisitions (one cycle per acquisition interval: the server
//                             sleeps between them as it does between hand-offs; median of 10
//                             blocks of 100, after the phases)
//   cmds_per_op, raw_cmds_per_op   server commands per operation, calls inside scripts included
//   scripts_per_op                 EVALSHA calls per operation
//   script_us, raw_script_us       server time inside EVALSHA per operation (commandstats usec:
//                                  the scripts' own cost, without the network I/O)
//   aggregate_vs_raw               aggregate cycles/s of redislock / of raw (8 x 8 cases)
//   aggregate_vs_same_commands, client_cpu_vs_same_commands
//                                  the same against raw hiredis sending redislock's own commands
//                                  (the library's client code alone); same_commands_vs_raw: the
//                                  price of the commands (the queue check in the release)
//   gap_p50_us, share_min          contended: hand-off gap and smallest share / fair share
//   floor_server_cpu_us, floor_script_us, floor_server_cpu_vs_raw_cycle, floor_gap_p50_us,
//   floor_overlaps, server_cpu_vs_floor
//                                  contended: the same for raw_handoff_lock (the floor of this
//                                  design: none of redislock's checks), measured in alternating
//                                  phases with redislock (lib, floor, floor, lib), and redislock
//                                  against it
#include "bench_support.hpp"
#include "process.hpp"
#include "redis_server.hpp"

#include <redislock/redislock.hpp>

#include <sys/resource.h>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace redislock;
using namespace redislock_bench;
using redislock_test::child_process;
using redislock_test::redis_server;
using clk = std::chrono::steady_clock;
using std::chrono::microseconds;
using std::chrono::nanoseconds;

namespace {

double cpu_seconds(int who) {
  rusage u{};
  ::getrusage(who, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

const char* const kToken = "0123456789abcdef0123456789abcdef";

/// What a phase cost: server CPU and commands between two samples.
struct phase_cost {
  double server_cpu = 0, script_usec = 0;
  long long commands = 0, scripts = 0;
  std::map<std::string, long long> calls;
  std::map<std::string, double> usec;
  void add(const phase_cost& other) {
    server_cpu += other.server_cpu, script_usec += other.script_usec;
    commands += other.commands, scripts += other.scripts;
    for (const auto& [k, v] : other.calls) calls[k] += v;
    for (const auto& [k, v] : other.usec) usec[k] += v;
  }
  void add(const server_sample& before, const server_sample& after) {
    server_cpu += after.cpu - before.cpu;
    script_usec += after.script_usec - before.script_usec;
    commands += after.total() - before.total();
    scripts += after.of("evalsha") - before.of("evalsha");
    for (const auto& [k, v] : after.calls) calls[k] += v - before.of(k);
    for (const auto& [k, v] : after.usec) {
      auto it = before.usec.find(k);
      usec[k] += v - (it == before.usec.end() ? 0 : it->second);
    }
  }
};

/// Server CPU of one raw uncontended cycle, in µs: the median over `blocks` blocks of
/// `cycles` each (one client), so that a burst of other load on the machine counts little.
std::vector<double> raw_cycle_server_us(int port, connection& admin, int blocks = 10, int cycles = 400) {
  raw_lock raw(port);
  std::vector<double> out;
  for (int b = 0; b < blocks; ++b) {
    const server_sample a = sample(admin);
    for (int i = 0; i < cycles; ++i) raw.lock("raw:cost:cycle", kToken), raw.unlock("raw:cost:cycle", kToken);
    out.push_back((sample(admin).cpu - a.cpu) * 1e6 / cycles);
  }
  return out;
}

/// The same at a given pace: one raw cycle every `interval` (the pace of the acquisitions it
/// is compared with), so that the server sleeps between cycles as it does between hand-offs.
/// Waking an idle server costs far more than a command (cold caches: with 2 ms holds the
/// scripts alone take three times as long as back to back), and a back-to-back raw cycle never
/// pays it.
std::vector<double> paced_raw_cycle_server_us(int port, connection& admin, nanoseconds interval, bool busy_core,
                                              int blocks = 10, int cycles = 100) {
  raw_lock raw(port);
  std::vector<double> out;
  std::atomic<bool> done{false};
  std::thread spinner([&] {
    while (busy_core && !done.load(std::memory_order_relaxed)) {
    }
  });
  for (int b = 0; b < blocks; ++b) {
    const server_sample a = sample(admin);
    auto next = clk::now();
    for (int i = 0; i < cycles; ++i) {
      next += interval;
      raw.lock("raw:cost:paced", kToken), raw.unlock("raw:cost:paced", kToken);
      std::this_thread::sleep_until(next);
    }
    out.push_back((sample(admin).cpu - a.cpu) * 1e6 / cycles);
  }
  done = true;
  spinner.join();
  return out;
}

/// Prints each command's calls per operation and, in brackets, the server's µs per operation
/// in it (the profile of a phase) to stderr.
void print_profile(const char* what, const phase_cost& c, double ops) {
  std::fprintf(stderr, "%s: %.2f commands/op (server %.2f us/op, in scripts %.2f us/op):", what,
               static_cast<double>(c.commands) / ops, c.server_cpu * 1e6 / ops, c.script_usec / ops);
  for (const auto& [k, v] : c.calls) {
    auto it = c.usec.find(k);
    if (v > 0)
      std::fprintf(stderr, " %s=%.2f (%.2f us)", k.c_str(), static_cast<double>(v) / ops,
                   (it == c.usec.end() ? 0 : it->second) / ops);
  }
  std::fprintf(stderr, "\n");
}

// ---------------------------------------------------------------------------------------
// One client, uncontended: blocks of cycles alternating raw, lib, lib, raw, ... Each block's
// client CPU (this thread's), server CPU and commands are summed per side.

void BM_cost_uncontended_cycle(benchmark::State& state) {
  client c(options_for(g_server->port()));
  mutex m(c, "cost-uncontended");
  raw_lock raw(g_server->port());
  connection admin = g_server->admin();
  const std::string raw_key = "raw:cost-uncontended";
  auto lib_cycle = [&] { m.lock(), m.unlock(); };
  auto raw_cycle = [&] { raw.lock(raw_key, kToken), raw.unlock(raw_key, kToken); };
  lib_cycle(), raw_cycle();
  constexpr int block = 500;
  for (auto _ : state) {
    double client[2] = {0, 0}, wall[2] = {0, 0};
    phase_cost server[2];
    long long cycles[2] = {0, 0};
    const auto end = clk::now() + std::chrono::duration<double>(seconds_per_run());
    for (int round = 0; clk::now() < end; ++round) {
      for (int k = 0; k < 2; ++k) {
        const int side = (round + k) % 2;  // 0 raw, 1 lib; raw lib lib raw raw lib ...
        const server_sample s0 = sample(admin);
        const auto t0 = clk::now();
        const double c0 = cpu_seconds(RUSAGE_THREAD);
        for (int i = 0; i < block; ++i) side == 0 ? raw_cycle() : lib_cycle();
        client[side] += cpu_seconds(RUSAGE_THREAD) - c0;
        wall[side] += std::chrono::duration<double>(clk::now() - t0).count();
        server[side].add(s0, sample(admin));
        cycles[side] += block;
      }
    }
    state.SetIterationTime(wall[1]);
    const double nr = static_cast<double>(cycles[0]), nl = static_cast<double>(cycles[1]);
    state.counters["client_cpu_us"] = client[1] * 1e6 / nl;
    state.counters["raw_client_cpu_us"] = client[0] * 1e6 / nr;
    state.counters["client_cpu_vs_raw"] = (client[1] / nl) / (client[0] / nr);
    state.counters["server_cpu_us"] = server[1].server_cpu * 1e6 / nl;
    state.counters["raw_server_cpu_us"] = server[0].server_cpu * 1e6 / nr;
    state.counters["server_cpu_vs_raw_cycle"] = (server[1].server_cpu / nl) / (server[0].server_cpu / nr);
    state.counters["cmds_per_op"] = static_cast<double>(server[1].commands) / nl;
    state.counters["raw_cmds_per_op"] = static_cast<double>(server[0].commands) / nr;
    state.counters["scripts_per_op"] = static_cast<double>(server[1].scripts) / nl;
    state.counters["script_us"] = server[1].script_usec / nl;
    state.counters["raw_script_us"] = server[0].script_usec / nr;
    state.counters["speed_vs_raw"] = (wall[0] / nr) / (wall[1] / nl);
    print_profile("uncontended lib", server[1], nl);
    print_profile("uncontended raw", server[0], nr);
  }
}
BENCHMARK(BM_cost_uncontended_cycle)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------------------
// 8 x 8: N contenders each cycling on its own lock name (no contention), as threads of this
// process or as processes; 12 phases raw, lib, same, same, lib, raw, twice (same: raw hiredis
// sending redislock's commands). Aggregate cycles/s, client CPU per cycle (each worker's
// thread, reported by it), server CPU per cycle; each against raw, and lib against same.

struct aggregate_result {
  long long cycles = 0;
  double client_cpu = 0, seconds = 0;
};

/// Who cycles in an aggregate phase: the raw lock, redislock, or raw hiredis sending
/// redislock's very commands (SET NX GET PX, the mutex's release script): the difference
/// between the last two is the library's client code alone, the rest is the commands.
enum side : int { raw_side = 0, lib_side = 1, same_commands_side = 2 };

// One worker's loop until end_ns on its own name: cycles and its thread's CPU.
aggregate_result cycle_until(int port, side who, const std::string& name, std::int64_t start_ns, std::int64_t end_ns) {
  aggregate_result out;
  auto loop = [&](auto&& cycle) {
    cycle();
    while (now_ns() < start_ns) std::this_thread::sleep_for(microseconds(100));
    const double c0 = cpu_seconds(RUSAGE_THREAD);
    while (now_ns() < end_ns) cycle(), ++out.cycles;
    out.client_cpu = cpu_seconds(RUSAGE_THREAD) - c0;
  };
  if (who == lib_side) {
    client c(options_for(port));
    mutex m(c, name);
    loop([&] { m.lock(), m.unlock(); });
  } else if (who == same_commands_side) {
    raw_lock raw(port);
    const std::string key = "raw:{" + name + "}";
    loop([&] { raw.lock_same_commands(key, kToken), raw.unlock_same_commands(key, kToken); });
  } else {
    raw_lock raw(port);
    const std::string key = "raw:" + name;
    loop([&] { raw.lock(key, kToken), raw.unlock(key, kToken); });
  }
  return out;
}

aggregate_result run_threads(int n, side who, std::int64_t start, std::int64_t end) {
  std::vector<aggregate_result> r(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back(
        [&, i] { r[i] = cycle_until(g_server->port(), who, "cost-own-" + std::to_string(i), start, end); });
  for (auto& t : threads) t.join();
  aggregate_result sum;
  for (const auto& x : r) sum.cycles += x.cycles, sum.client_cpu += x.client_cpu;
  return sum;
}

aggregate_result run_processes(int n, side who, std::int64_t start, std::int64_t end) {
  std::vector<child_process> children;
  std::vector<int> pipes;
  for (int i = 0; i < n; ++i) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    children.emplace_back(
        std::vector<std::string>{g_self, "--worker", std::to_string(g_server->port()), std::to_string(who),
                                 "cost-proc-" + std::to_string(i), std::to_string(start), std::to_string(end)},
        fds[1]);
    ::close(fds[1]);
    pipes.push_back(fds[0]);
  }
  aggregate_result sum;
  for (int i = 0; i < n; ++i) {
    std::string text;
    char buf[256];
    for (ssize_t got; (got = ::read(pipes[i], buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(got));
    ::close(pipes[i]);
    if (children[i].wait_for(std::chrono::seconds(60)) != 0) throw std::runtime_error("a worker failed");
    std::istringstream in(text);
    aggregate_result r;
    in >> r.cycles >> r.client_cpu;
    sum.cycles += r.cycles, sum.client_cpu += r.client_cpu;
  }
  return sum;
}

template <class Run>
void aggregate(benchmark::State& state, Run&& run, std::int64_t warm_up_ns) {
  const int n = static_cast<int>(state.range(0));
  static constexpr side order[] = {raw_side, lib_side, same_commands_side, same_commands_side, lib_side, raw_side};
  constexpr int phases = 12;
  const double seconds = seconds_per_run() / 8;  // raw and lib get 4 phases each, as before "same" was added
  connection admin = g_server->admin();
  for (auto _ : state) {
    aggregate_result side[3];
    phase_cost server[3];
    for (int phase = 0; phase < phases; ++phase) {
      const auto who = order[phase % 6];
      const std::int64_t start = now_ns() + warm_up_ns, end = start + static_cast<std::int64_t>(seconds * 1e9);
      // The server sample brackets the workers' setup too: a few commands per worker.
      const server_sample s0 = sample(admin);
      const aggregate_result r = run(n, who, start, end);
      server[who].add(s0, sample(admin));
      side[who].cycles += r.cycles, side[who].client_cpu += r.client_cpu, side[who].seconds += seconds;
    }
    state.SetIterationTime(phases * seconds);
    const double ns = static_cast<double>(side[2].cycles);
    state.counters["aggregate_vs_same_commands"] =
        (static_cast<double>(side[1].cycles) / side[1].seconds) / (ns / side[2].seconds);
    state.counters["client_cpu_vs_same_commands"] =
        (side[1].client_cpu / static_cast<double>(side[1].cycles)) / (side[2].client_cpu / ns);
    state.counters["same_commands_vs_raw"] =
        (ns / side[2].seconds) / (static_cast<double>(side[0].cycles) / side[0].seconds);
    const double nr = static_cast<double>(side[0].cycles), nl = static_cast<double>(side[1].cycles);
    state.counters["cycles_per_s"] = nl / side[1].seconds;
    state.counters["raw_cycles_per_s"] = nr / side[0].seconds;
    state.counters["aggregate_vs_raw"] = (nl / side[1].seconds) / (nr / side[0].seconds);
    state.counters["client_cpu_us"] = side[1].client_cpu * 1e6 / nl;
    state.counters["raw_client_cpu_us"] = side[0].client_cpu * 1e6 / nr;
    state.counters["client_cpu_vs_raw"] = (side[1].client_cpu / nl) / (side[0].client_cpu / nr);
    state.counters["server_cpu_us"] = server[1].server_cpu * 1e6 / nl;
    state.counters["raw_server_cpu_us"] = server[0].server_cpu * 1e6 / nr;
    state.counters["server_cpu_vs_raw_cycle"] = (server[1].server_cpu / nl) / (server[0].server_cpu / nr);
    state.counters["cmds_per_op"] = static_cast<double>(server[1].commands) / nl;
    state.counters["raw_cmds_per_op"] = static_cast<double>(server[0].commands) / nr;
  }
}

void BM_cost_aggregate_threads(benchmark::State& state) { aggregate(state, run_threads, 200'000'000); }
BENCHMARK(BM_cost_aggregate_threads)
    ->ArgName("n")
    ->Arg(8)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

void BM_cost_aggregate_processes(benchmark::State& state) { aggregate(state, run_processes, 500'000'000); }
BENCHMARK(BM_cost_aggregate_processes)
    ->ArgName("n")
    ->Arg(8)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------------------
// Contended hand-off: N threads, each with its own client and lock object, on one name;
// lock, hold (spinning), unlock, again. Server CPU and commands per acquisition, for redislock
// and, in the same run, for raw_handoff_lock: the floor of a queued hand-off over pub/sub.

struct event {
  int who;
  std::int64_t acquired, releasing;
};

/// The floor of this design, a queued hand-off over pub/sub, hand-written on raw hiredis: a
/// waiter joins a list in one script (SET NX PX, else RPUSH) and sleeps on its own channel; a
/// release pops the head, writes it into the lock key and publishes to it in one script (GET,
/// LPOP, SET, PUBLISH): 8 server commands per contended acquisition, two round trips (the join,
/// the release) and one notice. Not a usable lock: a waiter that crashed, gave up or froze
/// while queued gets the lock for a whole lease (nothing checks that it still listens or still
/// waits), a notice also reaches a stale subscriber on a replica, a lost reply queues a waiter
/// twice, and nothing expires the list. What redislock pays above it is what those checks cost.
class raw_handoff_lock {
 public:
  raw_handoff_lock(int port, std::string key, std::string token)
      : c_(connect(port)),
        sub_(connect(port)),
        key_(std::move(key)),
        queue_(key_ + ":list"),
        token_(std::move(token)),
        channel_(key_ + ":ch:" + token_) {
    const timeval bound{10, 0};  // a lost notice fails the benchmark instead of hanging it
    if (redisSetTimeout(sub_.get(), bound) != REDIS_OK) throw std::runtime_error("raw_handoff_lock: no timeout");
    join_sha_ = text(command(c_.get(), {"SCRIPT", "LOAD", kJoin}));
    release_sha_ = text(command(c_.get(), {"SCRIPT", "LOAD", kRelease}));
    command(sub_.get(), {"SUBSCRIBE", channel_});
  }

  void lock() {
    if (command(c_.get(), {"EVALSHA", join_sha_, "2", key_, queue_, token_, "30000"})->integer == 1) return;
    void* r = nullptr;
    if (redisGetReply(sub_.get(), &r) != REDIS_OK) throw std::runtime_error("raw_handoff_lock: no notice within 10 s");
    freeReplyObject(r);  // the release wrote our token into the lock key before it told us
  }
  void unlock() { command(c_.get(), {"EVALSHA", release_sha_, "2", key_, queue_, token_, "30000", key_ + ":ch:"}); }

 private:
  struct context_free {
    void operator()(redisContext* c) const { redisFree(c); }
  };
  using context_ptr = std::unique_ptr<redisContext, context_free>;
  static context_ptr connect(int port) {
    context_ptr c(redisConnect("127.0.0.1", port));
    if (!c || c->err) throw std::runtime_error("raw_handoff_lock: cannot connect");
    return c;
  }
  static reply_ptr command(redisContext* c, std::initializer_list<std::string_view> argv) {
    constexpr std::size_t max_args = 12;
    if (argv.size() > max_args) throw std::logic_error("raw_handoff_lock: too many arguments");
    const char* ptrs[max_args];
    std::size_t lens[max_args];
    int n = 0;
    for (std::string_view a : argv) ptrs[n] = a.data(), lens[n++] = a.size();
    reply_ptr r(static_cast<redisReply*>(redisCommandArgv(c, n, ptrs, lens)));
    if (!r || r->type == REDIS_REPLY_ERROR) throw std::runtime_error("raw_handoff_lock: command failed");
    return r;
  }
  static std::string text(const reply_ptr& r) { return std::string(r->str, r->len); }
  static constexpr const char* kJoin = R"lua(
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
redis.call('RPUSH', KEYS[2], ARGV[1])
return 0)lua";
  static constexpr const char* kRelease = R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local head = redis.call('LPOP', KEYS[2])
if head then
  redis.call('SET', KEYS[1], head, 'PX', ARGV[2])
  redis.call('PUBLISH', ARGV[3] .. head, '1')
else
  redis.call('DEL', KEYS[1])
end
return 1)lua";
  context_ptr c_, sub_;
  std::string key_, queue_, token_, channel_, join_sha_, release_sha_;
};

/// What one contended phase measured: its acquisitions (in order of acquisition), the client
/// CPU of this process and the server's cost over it.
struct contended_phase {
  std::vector<event> events;
  double client_cpu = 0;
  phase_cost cost;
  std::string error;  // the first exception a thread met (the others then stop too)
};

/// N threads cycle lock, hold (spinning), unlock on their own lock object for `seconds`;
/// lock(i) / unlock(i) act on thread i's object.
template <class Lock, class Unlock>
contended_phase run_contended(int n, nanoseconds hold, double seconds, connection& admin, Lock&& lock,
                              Unlock&& unlock) {
  const std::int64_t start = now_ns() + 200'000'000, end = start + static_cast<std::int64_t>(seconds * 1e9);
  std::vector<std::vector<event>> results(n);
  std::vector<std::thread> threads;
  contended_phase out;
  std::mutex error_mutex;
  std::atomic<bool> failed{false};
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      results[i].reserve(1 << 16);
      while (now_ns() < start) std::this_thread::sleep_for(microseconds(100));
      try {
        while (now_ns() < end && !failed.load()) {
          lock(i);
          event e{i, now_ns(), 0};
          spin_for(hold);
          e.releasing = now_ns();
          unlock(i);
          results[i].push_back(e);
        }
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> g(error_mutex);
        if (out.error.empty()) out.error = e.what();
        failed = true;
      }
    });
  while (now_ns() < start) std::this_thread::sleep_for(microseconds(100));
  const server_sample s0 = sample(admin);
  const double c0 = cpu_seconds(RUSAGE_SELF);
  for (auto& t : threads) t.join();
  out.client_cpu = cpu_seconds(RUSAGE_SELF) - c0;
  out.cost.add(s0, sample(admin));
  for (auto& r : results) out.events.insert(out.events.end(), r.begin(), r.end());
  std::sort(out.events.begin(), out.events.end(),
            [](const event& a, const event& b) { return a.acquired < b.acquired; });
  return out;
}

// Args: contenders, hold in microseconds, fair (0/1). Four phases, each half the run: redislock,
// the floor (raw_handoff_lock), the floor, redislock; each side's cost is summed over its two.
void BM_cost_contended(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const nanoseconds hold = microseconds(state.range(1));
  const bool fair = state.range(2) != 0;
  const std::string name = "cost-contended-" + std::to_string(state.range(1)) + (fair ? "-fair" : "");
  connection admin = g_server->admin();
  for (auto _ : state) {
    std::vector<double> raw_blocks = raw_cycle_server_us(g_server->port(), admin);
    std::vector<std::unique_ptr<client>> clients;
    std::vector<std::unique_ptr<mutex>> locks;
    std::vector<std::unique_ptr<raw_handoff_lock>> floors;
    lock_options o;
    o.fair = fair;
    for (int i = 0; i < n; ++i) {
      clients.push_back(std::make_unique<client>(options_for(g_server->port())));
      locks.push_back(std::make_unique<mutex>(*clients.back(), name, o));
      locks.back()->lock(), locks.back()->unlock();  // connections, scripts
      floors.push_back(std::make_unique<raw_handoff_lock>(g_server->port(), "raw:" + name, "t" + std::to_string(i)));
      floors.back()->lock(), floors.back()->unlock();
    }
    const double half = seconds_per_run() / 2;
    contended_phase lib, floor;
    std::vector<double> gaps, floor_gaps;
    double overlaps = 0, floor_overlaps = 0;
    for (int phase = 0; phase < 4; ++phase) {
      const bool lib_phase = phase == 0 || phase == 3;
      contended_phase p =
          lib_phase ? run_contended(
                          n, hold, half, admin, [&](int i) { locks[i]->lock(); }, [&](int i) { locks[i]->unlock(); })
                    : run_contended(
                          n, hold, half, admin, [&](int i) { floors[i]->lock(); }, [&](int i) { floors[i]->unlock(); });
      if (!p.error.empty()) {
        state.SkipWithError(("contended: " + p.error).c_str());
        return;
      }
      contended_phase& side = lib_phase ? lib : floor;
      side.client_cpu += p.client_cpu;
      side.cost.add(p.cost);
      // Gaps and overlaps within a phase only (between phases the lock idles).
      for (std::size_t i = 1; i < p.events.size(); ++i) {
        if (p.events[i].acquired < p.events[i - 1].releasing) ++(lib_phase ? overlaps : floor_overlaps);
        (lib_phase ? gaps : floor_gaps)
            .push_back(static_cast<double>(p.events[i].acquired - p.events[i - 1].releasing) / 1e3);
      }
      side.events.insert(side.events.end(), p.events.begin(), p.events.end());
    }
    for (double b : raw_cycle_server_us(g_server->port(), admin)) raw_blocks.push_back(b);  // before and after
    const double raw_server_us = percentile(raw_blocks, 0.5);
    // At least one of each (a short smoke run): the counters stay finite.
    const double acq = std::max<double>(static_cast<double>(lib.events.size()), 1),
                 floor_acq = std::max<double>(static_cast<double>(floor.events.size()), 1);
    const auto pace = nanoseconds(static_cast<std::int64_t>(seconds_per_run() * 1e9 / acq));
    const double paced_raw_server_us =
        percentile(paced_raw_cycle_server_us(g_server->port(), admin, pace, hold.count() > 0), 0.5);
    std::vector<double> per(n, 0);
    for (const auto& e : lib.events) per[e.who] += 1;
    const double server_us = lib.cost.server_cpu * 1e6 / acq, floor_server_us = floor.cost.server_cpu * 1e6 / floor_acq;
    state.SetIterationTime(seconds_per_run());
    state.counters["acquisitions"] = acq;
    state.counters["overlaps"] = overlaps;
    state.counters["gap_p50_us"] = percentile(gaps, 0.5);
    state.counters["share_min"] = *std::min_element(per.begin(), per.end()) / (acq / n);
    state.counters["client_cpu_us"] = lib.client_cpu * 1e6 / acq;
    state.counters["server_cpu_us"] = server_us;
    state.counters["raw_server_cpu_us"] = raw_server_us;
    state.counters["server_cpu_vs_raw_cycle"] = server_us / raw_server_us;
    state.counters["paced_raw_server_cpu_us"] = paced_raw_server_us;
    state.counters["server_cpu_vs_paced_raw_cycle"] = server_us / paced_raw_server_us;
    state.counters["cmds_per_op"] = static_cast<double>(lib.cost.commands) / acq;
    state.counters["scripts_per_op"] = static_cast<double>(lib.cost.scripts) / acq;
    state.counters["script_us"] = lib.cost.script_usec / acq;
    state.counters["floor_server_cpu_us"] = floor_server_us;
    state.counters["floor_script_us"] = floor.cost.script_usec / floor_acq;
    state.counters["floor_server_cpu_vs_raw_cycle"] = floor_server_us / raw_server_us;
    state.counters["server_cpu_vs_floor"] = server_us / floor_server_us;
    state.counters["floor_acquisitions"] = floor_acq;
    state.counters["floor_overlaps"] = floor_overlaps;
    state.counters["floor_gap_p50_us"] = percentile(floor_gaps, 0.5);
    const std::string hold_text = std::to_string(state.range(1)) + " us" + (fair ? ", fair" : "");
    print_profile(("contended hold " + hold_text).c_str(), lib.cost, acq);
    print_profile(("raw_handoff_lock (the floor), contended hold " + hold_text).c_str(), floor.cost, floor_acq);
  }
}
BENCHMARK(BM_cost_contended)
    ->ArgNames({"n", "hold_us", "fair"})
    ->Args({8, 0, 0})
    ->Args({8, 2000, 0})
    ->Args({8, 2000, 1})
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------------------
// Renewals: N auto_renew locks held through the phase on one client; its watchdog renews
// each every lease/3. Server CPU and commands per renewal (EVALSHA calls seen by the server).

void BM_cost_renewals(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  connection admin = g_server->admin();
  for (auto _ : state) {
    std::vector<double> raw_blocks = raw_cycle_server_us(g_server->port(), admin);
    client c(options_for(g_server->port()));
    lock_options o;
    o.auto_renew = true;
    o.lease = std::chrono::milliseconds(300);
    std::vector<std::unique_ptr<mutex>> locks;
    for (int i = 0; i < n; ++i) {
      locks.push_back(std::make_unique<mutex>(c, "cost-renew-" + std::to_string(i), o));
      locks.back()->lock();
    }
    const server_sample s0 = sample(admin);
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds_per_run()));
    const server_sample s1 = sample(admin);
    for (auto& l : locks) l->unlock();
    phase_cost cost;
    cost.add(s0, s1);
    for (double b : raw_cycle_server_us(g_server->port(), admin)) raw_blocks.push_back(b);
    const double raw_server_us = percentile(raw_blocks, 0.5);
    // Renewals by the watchdog's count: where the server has SET IFEQ they run no script.
    const double renewals = static_cast<double>(cost.scripts + cost.calls["set"]);
    state.SetIterationTime(seconds_per_run());
    state.counters["renewals"] = renewals;
    state.counters["server_cpu_us"] = cost.server_cpu * 1e6 / renewals;
    state.counters["raw_server_cpu_us"] = raw_server_us;
    state.counters["server_cpu_vs_raw_cycle"] = cost.server_cpu * 1e6 / renewals / raw_server_us;
    state.counters["cmds_per_op"] = static_cast<double>(cost.commands) / renewals;
    print_profile("renewals", cost, renewals);
  }
}
BENCHMARK(BM_cost_renewals)->ArgName("n")->Arg(256)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------------------
// Renewal forms: N leases renewed by one client's watchdog, with the mutex's owner-checked
// extend script (EVALSHA) and with `SET key token IFEQ token PX lease`, same run, same server,
// in phases script, SET IFEQ, SET IFEQ, script. Each phase registers N renewal requests
// (watchdog::add, as basic_mutex does; renewal_request::as_set_ifeq picks the form) on keys it
// set, waits for one round, then measures for REDISLOCK_BENCH_SECONDS. Counters: server CPU per
// renewal of each form, and as ratios to the raw uncontended cycle (SET NX PX + EVALSHA
// compare-and-delete) and to a raw PEXPIRE (pipelined 1000 at a time, not owner-checked: the
// floor of any renewal), both measured on the same server in the same run. Skipped where the
// server has no SET IFEQ (Redis before 8.4, Valkey before 8.1).

/// Server CPU of one raw PEXPIRE in µs (median of `blocks` blocks of `n` keys, pipelined 1000
/// at a time on one connection): the floor of a renewal.
std::vector<double> raw_pexpire_server_us(connection& admin, const std::vector<std::string>& keys, int blocks = 6) {
  std::vector<double> out;
  for (int b = 0; b < blocks; ++b) {
    const server_sample a = sample(admin);
    for (std::size_t i = 0; i < keys.size(); i += 1000) {
      const std::size_t end = std::min(keys.size(), i + 1000);
      for (std::size_t k = i; k < end; ++k) admin.append({"PEXPIRE", keys[k], "3000"});
      for (std::size_t k = i; k < end; ++k) admin.read_reply();
    }
    out.push_back((sample(admin).cpu - a.cpu) * 1e6 / static_cast<double>(keys.size()));
  }
  return out;
}

struct renewal_phase {
  phase_cost cost;
  double renewals = 0;
};

renewal_phase renew_for_a_while(client& c, connection& admin, const std::vector<std::string>& keys, bool set_ifeq,
                                int phase) {
  using std::chrono::milliseconds;
  const milliseconds lease(3000);  // every lease renewed each second
  const std::string token = "phase-" + std::to_string(phase) + "-0123456789abcdef", lease_ms = "3000";
  const clk::time_point set_at = clk::now();
  for (std::size_t i = 0; i < keys.size(); i += 1000) {
    const std::size_t end = std::min(keys.size(), i + 1000);
    for (std::size_t k = i; k < end; ++k) admin.append({"SET", keys[k], token, "PX", lease_ms});
    for (std::size_t k = i; k < end; ++k) admin.read_reply();
  }
  watchdog& dog = c.watchdog();
  std::vector<watchdog::registration> held;
  held.reserve(keys.size());
  for (const std::string& k : keys) {
    renewal_request r;
    r.name = k;
    r.route_key = k;
    r.extend = &detail::mutex_scripts::extend();
    r.keys = {k};
    r.args = {token, lease_ms};
    r.as_set_ifeq = set_ifeq;
    r.lease = lease;
    r.confirmed = set_at;
    held.push_back(dog.add(std::move(r)));
  }
  const auto total = [](const watchdog_stats& s) { return s.renewals; };
  const std::uint64_t start = total(dog.stats());
  dog.wait_for_stats(lease * 2, [&](const watchdog_stats& s) { return total(s) >= start + keys.size(); });
  const std::uint64_t r0 = total(dog.stats());
  const server_sample s0 = sample(admin);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds_per_run()));
  const server_sample s1 = sample(admin);
  const watchdog_stats end = dog.stats();
  held.clear();
  if (end.lost > 0 || end.failures > 0) throw std::runtime_error("renewal phase: leases lost or renewals failed");
  renewal_phase p;
  p.cost.add(s0, s1);
  p.renewals = static_cast<double>(total(end) - r0);
  return p;
}

void BM_cost_renewal_forms(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  connection admin = g_server->admin();
  if (!admin.features().set_ifeq) {
    state.SkipWithError((admin.features().describe() + " has no SET IFEQ").c_str());
    return;
  }
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back("cost-renewal-form:{" + std::to_string(i) + "}");
  for (auto _ : state) {
    std::vector<double> raw_blocks = raw_cycle_server_us(g_server->port(), admin);
    client c(options_for(g_server->port()));
    renewal_phase form[2];  // [0] script, [1] SET IFEQ
    int phase = 0;
    for (bool set_ifeq : {false, true, true, false}) {
      const renewal_phase p = renew_for_a_while(c, admin, keys, set_ifeq, phase++);
      form[set_ifeq].cost.add(p.cost);
      form[set_ifeq].renewals += p.renewals;
    }
    std::vector<double> pexpire_blocks = raw_pexpire_server_us(admin, keys);
    for (double b : raw_cycle_server_us(g_server->port(), admin)) raw_blocks.push_back(b);
    admin.command({"FLUSHALL"});
    const double raw_cycle_us = percentile(raw_blocks, 0.5), raw_pexpire_us = percentile(pexpire_blocks, 0.5);
    const double script_us = form[0].cost.server_cpu * 1e6 / form[0].renewals;
    const double ifeq_us = form[1].cost.server_cpu * 1e6 / form[1].renewals;
    state.SetIterationTime(4 * seconds_per_run());
    state.counters["renewals_script"] = form[0].renewals;
    state.counters["renewals_set_ifeq"] = form[1].renewals;
    state.counters["script_server_cpu_us"] = script_us;
    state.counters["set_ifeq_server_cpu_us"] = ifeq_us;
    state.counters["set_ifeq_vs_script"] = ifeq_us / script_us;
    state.counters["raw_server_cpu_us"] = raw_cycle_us;
    state.counters["raw_pexpire_server_cpu_us"] = raw_pexpire_us;
    state.counters["script_vs_raw_cycle"] = script_us / raw_cycle_us;
    state.counters["set_ifeq_vs_raw_cycle"] = ifeq_us / raw_cycle_us;
    state.counters["script_vs_raw_pexpire"] = script_us / raw_pexpire_us;
    state.counters["set_ifeq_vs_raw_pexpire"] = ifeq_us / raw_pexpire_us;
    print_profile("renewals by script", form[0].cost, form[0].renewals);
    print_profile("renewals by SET IFEQ", form[1].cost, form[1].renewals);
  }
}
BENCHMARK(BM_cost_renewal_forms)
    ->ArgName("n")
    ->Arg(10000)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// argv: --worker port side name start_ns end_ns; prints "cycles cpu_seconds".
int worker_main(char** argv) {
  const aggregate_result r = cycle_until(std::atoi(argv[2]), static_cast<side>(std::atoi(argv[3])), argv[4],
                                         std::atoll(argv[5]), std::atoll(argv[6]));
  std::printf("%lld %.9f\n", r.cycles, r.client_cpu);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return redislock_bench::bench_main(argc, argv, "--worker", 7, worker_main); }
