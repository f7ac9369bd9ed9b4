// The cluster scale-out benchmark: redislock::mutex on one redis-server versus
// basic_mutex<cluster_client> on a 3-master Redis Cluster (no replicas), both started in this
// run (tests/harness/redis_server.hpp, redis_cluster.hpp), measured in alternating rounds so
// that both see the same load on a shared machine: report the ratios, not absolute times alone.
//
//   bench_cluster [google-benchmark flags]   REDISLOCK_BENCH_SECONDS=2: length of each target's
//                                            measurement, split into 2 alternating rounds
//
// BM_scale_out/threads:N — N threads, each with its own client object, cycle try_lock + unlock
// over their share of 64 lock names (uncontended: a name belongs to one thread):
//   single_ops_per_s, cluster_ops_per_s   aggregate cycles/s; scale_out_ratio = cluster / single
//   client_cpu_*        CPU seconds of this process per wall second (cores busy in the clients)
//   server_cpu_*        CPU seconds of the server(s) per wall second (INFO cpu, summed over nodes)
//   cmds_per_op_*       server commands per cycle (INFO commandstats deltas; calls made inside
//                       scripts count too, the INFO calls themselves do not)
// On a host with few cores the clients and servers share them: the CPU figures show which side
// limits the ratio.
//
// BM_handoff/hold_us:H — two holders, each with its own client object (cluster: its own
// cluster_client), alternate on one mutex: each holds for H us while the other waits in
// try_lock_for, so each acquisition is a hand-off. (A waiter that backs off waits longer the
// longer the hold: hence two holds.) gap = the waiter's acquisition - the holder's unlock() call:
//   gap_p50_single_us, gap_p50_cluster_us (and p99); handoff_gap_vs_single = cluster / single
//   p50; cmds_per_handoff_*. The cluster client waits as it does today (see cluster_client.hpp).
#include "redis_cluster.hpp"
#include "redis_server.hpp"

#include <redislock/cluster_client.hpp>
#include <redislock/redislock.hpp>

#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace redislock;
using redislock_test::redis_cluster;
using redislock_test::redis_server;
using clk = std::chrono::steady_clock;

namespace {

redis_server* g_single = nullptr;
redis_cluster* g_cluster = nullptr;
constexpr int kNames = 64;
constexpr int kRounds = 2;

double phase_seconds() {
  const char* s = std::getenv("REDISLOCK_BENCH_SECONDS");
  return (s && *s ? std::atof(s) : 2.0) / kRounds;
}

double seconds_since(clk::time_point t0) { return std::chrono::duration<double>(clk::now() - t0).count(); }

double p(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}

double process_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// A number after `field` in an INFO text (0 when absent).
double info_number(const std::string& info, const std::string& field) {
  const auto at = info.find(field);
  return at == std::string::npos ? 0 : std::atof(info.c_str() + at + field.size());
}

// The servers of one target, read through admin connections: CPU seconds and commands run.
struct server_counters {
  double cpu = 0, commands = 0;
};
server_counters read_counters(const std::vector<int>& ports) {
  server_counters out;
  for (int port : ports) {
    connection c = redis_cluster::admin(port);
    const std::string cpu = redis_cluster::text(c.command({"INFO", "cpu"}));
    out.cpu += info_number(cpu, "used_cpu_user:") + info_number(cpu, "used_cpu_sys:");
    const std::string stats = redis_cluster::text(c.command({"INFO", "commandstats"}));
    // "cmdstat_<name>:calls=N,...": every command but INFO (ours).
    for (std::size_t at = stats.find("cmdstat_"); at != std::string::npos; at = stats.find("cmdstat_", at + 1))
      if (stats.compare(at, 13, "cmdstat_info:") != 0) out.commands += info_number(stats.substr(at), "calls=");
  }
  return out;
}

std::vector<int> single_ports() { return {g_single->port()}; }
std::vector<int> cluster_ports() { return g_cluster->masters(); }

client_options single_options() {
  client_options o;
  o.connection = g_single->options();
  o.connection.command_timeout = std::chrono::seconds(10);
  o.pool_size = 1;
  return o;
}
cluster_options cluster_client_options() {
  cluster_options o = g_cluster->options();
  o.seeds.front().command_timeout = std::chrono::seconds(10);
  o.pool_size = 1;
  return o;
}

// What one target's phases add up to.
struct totals {
  double ops = 0, wall = 0, client_cpu = 0, server_cpu = 0, commands = 0;
  std::vector<double> gaps_us;
  void add(double n, clk::time_point t0, double cpu0, const server_counters& s0, const server_counters& s1) {
    ops += n;
    wall += seconds_since(t0);
    client_cpu += process_cpu_seconds() - cpu0;
    server_cpu += s1.cpu - s0.cpu;
    commands += s1.commands - s0.commands;
  }
};

// Runs `phase` (which returns its operation count) between counter readings.
template <class Phase>
void measured(totals& t, const std::vector<int>& ports, Phase&& phase) {
  const server_counters s0 = read_counters(ports);
  const double cpu0 = process_cpu_seconds();
  const auto t0 = clk::now();
  const double n = phase();
  t.add(n, t0, cpu0, s0, read_counters(ports));
}

// ---------------------------------------------------------------------------------------------
// Aggregate uncontended cycles over many names.

// N threads, thread i cycling over names i, i+N, ... with a client of its own made by make().
template <class Client, class MakeClient>
double cycles(int threads, double seconds, MakeClient&& make) {
  std::atomic<long long> total{0};
  std::atomic<bool> failed{false};
  const auto end = clk::now() + std::chrono::duration_cast<clk::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      std::unique_ptr<Client> c = make();
      std::vector<std::unique_ptr<basic_mutex<Client>>> locks;
      for (int n = t; n < kNames; n += threads)
        locks.push_back(std::make_unique<basic_mutex<Client>>(*c, "scale-" + std::to_string(n)));
      long long done = 0;
      for (std::size_t i = 0; clk::now() < end; i = (i + 1) % locks.size()) {
        if (!locks[i]->try_lock()) {
          failed = true;  // uncontended by construction: a refusal is a bug
          break;
        }
        locks[i]->unlock();
        ++done;
      }
      total += done;
    });
  for (auto& w : workers) w.join();
  if (failed) throw std::runtime_error("bench_cluster: an uncontended try_lock failed");
  return static_cast<double>(total.load());
}

void BM_scale_out(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const double seconds = phase_seconds();
  auto single = [] { return std::make_unique<client>(single_options()); };
  auto cluster = [] { return std::make_unique<cluster_client>(cluster_client_options()); };
  for (auto _ : state) {
    totals s, c;
    for (int round = 0; round < kRounds; ++round) {
      measured(s, single_ports(), [&] { return cycles<client>(threads, seconds, single); });
      measured(c, cluster_ports(), [&] { return cycles<cluster_client>(threads, seconds, cluster); });
    }
    state.SetIterationTime(s.wall + c.wall);
    state.counters["single_ops_per_s"] = s.ops / s.wall;
    state.counters["cluster_ops_per_s"] = c.ops / c.wall;
    state.counters["scale_out_ratio"] = (c.ops / c.wall) / (s.ops / s.wall);
    state.counters["client_cpu_single"] = s.client_cpu / s.wall;
    state.counters["client_cpu_cluster"] = c.client_cpu / c.wall;
    state.counters["server_cpu_single"] = s.server_cpu / s.wall;
    state.counters["server_cpu_cluster"] = c.server_cpu / c.wall;
    state.counters["cmds_per_op_single"] = s.commands / s.ops;
    state.counters["cmds_per_op_cluster"] = c.commands / c.ops;
  }
}
BENCHMARK(BM_scale_out)
    ->ArgName("threads")
    ->Arg(2)
    ->Arg(8)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------------------------
// Contended hand-off between two client objects.

// Two holders alternate on one name: after its unlock() a holder waits until the other has
// acquired before it asks again, so every acquisition is a hand-off to a waiter already waiting
// (the hold gives it time to be). Returns the hand-offs; their gaps go to `gaps_us`.
template <class Client, class MakeClient>
double handoffs(double seconds, std::chrono::microseconds hold, const std::string& name, MakeClient&& make,
                std::vector<double>& gaps_us) {
  std::atomic<long long> acquisitions{0};
  std::atomic<std::int64_t> released_ns{0};
  std::atomic<bool> stop{false}, failed{false};
  std::vector<double> gaps[2];
  const auto end = clk::now() + std::chrono::duration_cast<clk::duration>(std::chrono::duration<double>(seconds));
  auto now_ns = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(clk::now().time_since_epoch()).count();
  };
  auto holder = [&](int who) {
    std::unique_ptr<Client> c = make();
    basic_mutex<Client> m(*c, name);
    while (!stop) {
      if (!m.try_lock_for(std::chrono::seconds(5))) {
        failed = stop = true;
        break;
      }
      const long long mine = ++acquisitions;
      if (mine > 1) gaps[who].push_back(static_cast<double>(now_ns() - released_ns.load()) / 1e3);
      const auto hold_end = clk::now() + hold;
      while (clk::now() < hold_end) {
      }
      if (clk::now() >= end) stop = true;
      released_ns = now_ns();
      m.unlock();
      // Wait for the other to take it (bounded by the other's try_lock_for), then ask again.
      while (!stop && acquisitions.load() == mine) std::this_thread::yield();
    }
  };
  std::thread a(holder, 0), b(holder, 1);
  a.join();
  b.join();
  if (failed) throw std::runtime_error("bench_cluster: a hand-off took longer than 5 s");
  gaps_us.insert(gaps_us.end(), gaps[0].begin(), gaps[0].end());
  gaps_us.insert(gaps_us.end(), gaps[1].begin(), gaps[1].end());
  return static_cast<double>(gaps[0].size() + gaps[1].size());
}

void BM_handoff(benchmark::State& state) {
  const double seconds = phase_seconds();
  const std::chrono::microseconds hold(state.range(0));
  const std::string name = "handoff-" + std::to_string(hold.count());
  auto single = [] { return std::make_unique<client>(single_options()); };
  auto cluster = [] { return std::make_unique<cluster_client>(cluster_client_options()); };
  for (auto _ : state) {
    totals s, c;
    for (int round = 0; round < kRounds; ++round) {
      measured(s, single_ports(), [&] { return handoffs<client>(seconds, hold, name, single, s.gaps_us); });
      measured(c, cluster_ports(), [&] { return handoffs<cluster_client>(seconds, hold, name, cluster, c.gaps_us); });
    }
    state.SetIterationTime(s.wall + c.wall);
    state.counters["handoffs_single"] = s.ops;
    state.counters["handoffs_cluster"] = c.ops;
    state.counters["gap_p50_single_us"] = p(s.gaps_us, 0.5);
    state.counters["gap_p99_single_us"] = p(s.gaps_us, 0.99);
    state.counters["gap_p50_cluster_us"] = p(c.gaps_us, 0.5);
    state.counters["gap_p99_cluster_us"] = p(c.gaps_us, 0.99);
    state.counters["handoff_gap_vs_single"] = p(c.gaps_us, 0.5) / p(s.gaps_us, 0.5);
    state.counters["cmds_per_handoff_single"] = s.commands / s.ops;
    state.counters["cmds_per_handoff_cluster"] = c.commands / c.ops;
  }
}
BENCHMARK(BM_handoff)
    ->ArgName("hold_us")
    ->Arg(1000)
    ->Arg(20000)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  redis_server single;
  redis_cluster cluster(3, 0);
  g_single = &single;
  g_cluster = &cluster;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  g_single = nullptr;
  g_cluster = nullptr;
  return 0;
}
