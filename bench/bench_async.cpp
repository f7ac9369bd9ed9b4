// Acquisitions per second, and per second of client CPU, of redislock::async_mutex (every
// acquirer a callback chain on ONE io_context thread) against redislock::mutex (every acquirer
// a thread with its own mutex object), at n concurrent acquirers over max(1, n/100) names,
// each acquirer locking and unlocking in a loop without holding. Against the raw baseline: one
// thread's uncontended SET NX PX + owner-checked DEL cycles per second on raw hiredis.
//
// Threads stop where each needs a connection and a stack: 10,000 blocking acquirers would need
// 10,000 connections (Redis refuses clients beyond maxclients, 10,000 by default, and every
// thread costs a stack), so the blocking run stops at 1,024; the async run needs two
// connections whatever n is.
//
// Counters: acq_per_s; client_cpu_us_per_acq (this process's user + system CPU per
// acquisition); acq_per_client_core_s (acquisitions per second of client CPU);
// server_cpu_us_per_acq; vs_raw (acq_per_s / the raw baseline's cycles per second); for the
// async runs loop_late_p99_us / loop_late_max_us, how late a 1 ms timer on the same loop fired.
#include "bench_support.hpp"

#include <redislock/asio.hpp>

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <sys/resource.h>

#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <thread>

using namespace redislock_bench;
using std::chrono::microseconds;
using std::chrono::milliseconds;

namespace {

double process_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

int names_for(int n) { return std::max(1, n / 100); }

// Raw hiredis, one thread, no contention: lock + unlock cycles per second.
double raw_cycles_per_second() {
  raw_lock raw(g_server->port());
  const auto end = clk::now() + milliseconds(300);
  long cycles = 0;
  for (; clk::now() < end; ++cycles) {
    raw.lock("raw-baseline", "token");
    raw.unlock("raw-baseline", "token");
  }
  return static_cast<double>(cycles) / 0.3;
}

struct run_result {
  long acquisitions = 0;
  double seconds = 0, client_cpu = 0, server_cpu = 0;
  std::vector<double> lateness_us;
};

void report(benchmark::State& state, const run_result& r, double raw_per_s) {
  const double acq = static_cast<double>(std::max(1L, r.acquisitions));
  state.counters["acq_per_s"] = acq / r.seconds;
  state.counters["client_cpu_us_per_acq"] = r.client_cpu / acq * 1e6;
  state.counters["acq_per_client_core_s"] = r.client_cpu > 0 ? acq / r.client_cpu : 0;
  state.counters["server_cpu_us_per_acq"] = r.server_cpu / acq * 1e6;
  state.counters["vs_raw"] = acq / r.seconds / raw_per_s;
  if (!r.lateness_us.empty()) {
    state.counters["loop_late_p99_us"] = percentile(r.lateness_us, 0.99);
    state.counters["loop_late_max_us"] = percentile(r.lateness_us, 1.0);
  }
}

// Counts the acquisitions between warm_up_end and end, with the CPU both sides spent meanwhile.
run_result measure_window(clk::time_point warm_up_end, clk::time_point end, const std::atomic<long>& acquisitions,
                          std::atomic<bool>& counting) {
  connection admin = g_server->admin();
  std::this_thread::sleep_until(warm_up_end);
  run_result r;
  const double cpu0 = process_cpu_seconds(), server0 = sample(admin).cpu;
  const auto t0 = clk::now();
  counting = true;
  std::this_thread::sleep_until(end);
  counting = false;
  r.acquisitions = acquisitions.load();
  r.seconds = std::chrono::duration<double>(clk::now() - t0).count();
  r.client_cpu = process_cpu_seconds() - cpu0;
  r.server_cpu = sample(admin).cpu - server0;
  return r;
}

run_result run_async(int n, double seconds) {
  asio::io_context io;
  auto work = asio::make_work_guard(io);
  std::thread loop([&] { io.run(); });
  run_result r;
  std::vector<double> lateness_us;  // written on the loop thread until ticking_done
  {
    redislock::async_client_options o;
    o.connection.port = g_server->port();
    o.connection.command_timeout = std::chrono::seconds(10);
    redislock::async_client client(io.get_executor(), o);
    std::vector<std::unique_ptr<redislock::async_mutex>> mutexes;
    for (int i = 0; i < names_for(n); ++i)
      mutexes.push_back(std::make_unique<redislock::async_mutex>(client, "async-" + std::to_string(i)));
    std::atomic<long> acquisitions{0};
    std::atomic<int> stopped{0};
    std::atomic<bool> counting{false};
    const auto warm_up_end = clk::now() + milliseconds(200);
    const auto end = warm_up_end + std::chrono::duration_cast<clk::duration>(std::chrono::duration<double>(seconds));
    // Lock, unlock, again until the end; only acquisitions after the warm-up count.
    std::function<void(redislock::async_mutex&)> cycle = [&](redislock::async_mutex& m) {
      m.async_lock([&](std::error_code e, redislock::async_hold h) {
        if (e) std::fprintf(stderr, "bench_async: %s\n", e.message().c_str());
        if (counting.load(std::memory_order_relaxed)) acquisitions.fetch_add(1, std::memory_order_relaxed);
        auto held = std::make_shared<redislock::async_hold>(std::move(h));
        held->async_unlock([&, held, failed = bool(e)](std::error_code, redislock::release_status) {
          if (failed || clk::now() >= end) ++stopped;
          else cycle(m);
        });
      });
    };
    // The loop's responsiveness: lateness of a 1 ms timer on the same io_context.
    asio::steady_timer tick(io);
    std::promise<void> ticking_done;
    std::function<void(clk::time_point)> arm = [&](clk::time_point due) {
      tick.expires_at(due);
      tick.async_wait([&, due](std::error_code) {
        if (counting.load()) lateness_us.push_back(std::chrono::duration<double, std::micro>(clk::now() - due).count());
        if (clk::now() >= end) return ticking_done.set_value();
        arm(clk::now() + milliseconds(1));
      });
    };
    asio::post(io, [&] {
      arm(clk::now() + milliseconds(1));
      for (int i = 0; i < n; ++i) cycle(*mutexes[static_cast<std::size_t>(i) % mutexes.size()]);
    });
    r = measure_window(warm_up_end, end, acquisitions, counting);
    while (stopped.load() < n) std::this_thread::sleep_for(milliseconds(1));
    ticking_done.get_future().wait();
    r.lateness_us = std::move(lateness_us);
  }
  work.reset();
  loop.join();
  return r;
}

run_result run_threads(int n, double seconds) {
  client_options o = options_for(g_server->port());
  o.pool_size = static_cast<std::size_t>(n);
  redislock::client pool(o);
  std::atomic<long> acquisitions{0};
  std::atomic<bool> counting{false};
  const auto warm_up_end = clk::now() + milliseconds(200);
  const auto end = warm_up_end + std::chrono::duration_cast<clk::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      redislock::mutex m(pool, "threads-" + std::to_string(i % names_for(n)));
      while (clk::now() < end) {
        m.lock();
        if (counting.load(std::memory_order_relaxed)) acquisitions.fetch_add(1, std::memory_order_relaxed);
        m.unlock();
      }
    });
  const run_result r = measure_window(warm_up_end, end, acquisitions, counting);
  for (auto& t : threads) t.join();
  return r;
}

// Arg: concurrent acquirers.
void run_benchmark(benchmark::State& state, run_result (*run)(int n, double seconds)) {
  for (auto _ : state) {
    const double raw = raw_cycles_per_second();
    const run_result r = run(static_cast<int>(state.range(0)), seconds_per_run());
    state.SetIterationTime(r.seconds);
    report(state, r, raw);
  }
}
void BM_async_one_loop_thread(benchmark::State& state) { run_benchmark(state, run_async); }
void BM_blocking_threads(benchmark::State& state) { run_benchmark(state, run_threads); }
BENCHMARK(BM_async_one_loop_thread)
    ->ArgName("n")
    ->Arg(8)
    ->Arg(64)
    ->Arg(1024)
    ->Arg(10000)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_blocking_threads)
    ->ArgName("n")
    ->Arg(8)
    ->Arg(64)
    ->Arg(1024)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) { return bench_main(argc, argv, "--no-child", 0, nullptr); }
