// Server memory per lock: what each lock kind keeps on the server while held, what a name
// leaves after a release that a waiter queued for and gave up on, what the fencing counter
// alone costs, and INFO memory's used_memory per name for many one-shot mutex names.
// Usage: footprint [--names N] [--threads T]   (defaults: 1,000,000 names, 4 threads)
// Starts its own throwaway redis-server (tests/harness/redis_server.hpp: a free loopback port,
// no persistence) and prints markdown tables. Exits 1 when a structural fact fails: a held lock
// with no key, a waiter that did not time out, a released name that leaves a key other than
// its fencing counter (a latch: a key without expiry), a fencing counter missing or without
// expiry, or keys left by the one-shot names other than one counter per fenced name. Timings
// and byte counts are printed, never asserted.
#include "redis_server.hpp"

#include <redislock/detail/fence_scripts.hpp>
#include <redislock/redislock.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace redislock;
using redislock_test::redis_server;

namespace {

std::vector<std::string> g_failures;  // structural facts that did not hold

void check(bool ok, const std::string& what) {
  if (!ok) g_failures.push_back(what);
}

std::string text(const redisReply& r) { return std::string(r.str, r.len); }

/// One field of INFO <section> ("" when absent).
std::string info_field(connection& admin, const char* section, const std::string& field) {
  reply_ptr r = admin.command({"INFO", section});
  std::istringstream in(text(*r));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) != 0) continue;
    std::string v = line.substr(field.size() + 1);
    if (!v.empty() && v.back() == '\r') v.pop_back();
    return v;
  }
  return "";
}

long long used_memory(connection& admin) { return std::stoll(info_field(admin, "memory", "used_memory")); }

struct key_stat {
  std::string key;
  long long bytes = 0;  // MEMORY USAGE key SAMPLES 0 (every element counted)
  long long pttl = 0;   // -1: no expiry
};

/// Every key of the lock `name` (its {hash tag} in the key), found with SCAN to the end.
std::vector<key_stat> keys_of(connection& admin, const std::string& name) {
  std::vector<key_stat> out;
  const std::string pattern = "*{" + name + "}*";
  std::string cursor = "0";
  do {
    reply_ptr r = admin.command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
    cursor = text(*r->element[0]);
    const redisReply& keys = *r->element[1];
    for (std::size_t i = 0; i < keys.elements; ++i) {
      key_stat k;
      k.key = text(*keys.element[i]);
      k.bytes = admin.command({"MEMORY", "USAGE", k.key, "SAMPLES", "0"})->integer;
      k.pttl = admin.command({"PTTL", k.key})->integer;
      out.push_back(k);
    }
  } while (cursor != "0");
  std::sort(out.begin(), out.end(), [](const key_stat& a, const key_stat& b) { return a.key < b.key; });
  return out;
}

long long total_bytes(const std::vector<key_stat>& keys) {
  long long n = 0;
  for (const key_stat& k : keys) n += k.bytes;
  return n;
}

std::string base_key(const std::string& name) { return "redislock:{" + name + "}"; }

/// "lock key 60 s, :c:… 60 s": each key as its suffix after the base key, with its expiry.
std::string describe(const std::vector<key_stat>& keys, const std::string& name, bool with_ttl = true) {
  if (keys.empty()) return "none";
  std::string out;
  for (const key_stat& k : keys) {
    std::string suffix = k.key.substr(base_key(name).size());
    if (suffix.empty()) suffix = "lock key";
    else if (suffix.rfind(":c:", 0) == 0) suffix = ":c:<object>";
    else suffix = "`" + suffix + "`";
    if (!out.empty()) out += ", ";
    out += suffix;
    if (with_ttl) out += k.pttl < 0 ? " (no expiry)" : " (" + std::to_string((k.pttl + 500) / 1000) + " s)";
  }
  return out;
}

bool is_fence(const key_stat& k, const std::string& name) { return k.key == base_key(name) + ":fence"; }

/// One lock kind as the measurements use it: one object of it, the holder or the waiter.
struct object_of_kind {
  virtual ~object_of_kind() = default;
  virtual void hold() = 0;
  /// Waits `d` for what the holder keeps (false: timed out, as expected).
  virtual bool wait_for(std::chrono::milliseconds d) = 0;
  virtual void release() = 0;
  /// Draws a fencing token; false when the kind has none.
  virtual bool fence() = 0;
};

/// The kinds whose hold is lock() / try_lock_for() / unlock() / fencing_token().
template <class Lock>
struct plain : object_of_kind {
  template <class... A>
  explicit plain(A&&... a) : lock(std::forward<A>(a)...) {}
  void hold() override { lock.lock(); }
  bool wait_for(std::chrono::milliseconds d) override { return lock.try_lock_for(d); }
  void release() override { lock.unlock(); }
  bool fence() override { return lock.fencing_token() > 0; }
  Lock lock;
};

/// The shared mutex's read hold; its waiter is a writer (a reader would be admitted at once).
struct read_hold : plain<shared_mutex> {
  using plain::plain;
  void hold() override { lock.lock_shared(); }
  void release() override { lock.unlock_shared(); }
};

/// A latch of count 1: "held" while it counts, "released" by the count_down that opens it; its
/// waiter is wait_for().
struct latch_hold : object_of_kind {
  latch_hold(client& c, const std::string& name) : c_(c), name_(name) {}
  void hold() override { l.emplace(c_, name_, 1); }
  bool wait_for(std::chrono::milliseconds d) override {
    hold();
    return l->wait_for(d);
  }
  void release() override { l->count_down(); }
  bool fence() override { return false; }
  client& c_;
  std::string name_;
  std::optional<latch> l;
};

struct kind_case {
  const char* label;
  bool latch;  // its released name keeps its keys until they expire (an open latch stays readable)
  std::function<std::unique_ptr<object_of_kind>(client&, const std::string&)> make;
};

std::vector<kind_case> kinds() {
  lock_options fair;
  fair.fair = true;
  return {
      {"mutex", false, [](client& c, const std::string& n) { return std::make_unique<plain<mutex>>(c, n); }},
      {"mutex (fair)", false,
       [fair](client& c, const std::string& n) { return std::make_unique<plain<mutex>>(c, n, fair); }},
      {"reentrant_mutex", false,
       [](client& c, const std::string& n) { return std::make_unique<plain<reentrant_mutex>>(c, n); }},
      {"shared_mutex (write)", false,
       [](client& c, const std::string& n) { return std::make_unique<plain<shared_mutex>>(c, n); }},
      {"shared_mutex (read)", false, [](client& c, const std::string& n) { return std::make_unique<read_hold>(c, n); }},
      {"semaphore (1 permit)", false,
       [](client& c, const std::string& n) { return std::make_unique<plain<semaphore>>(c, n, 1); }},
      {"latch (count 1)", true, [](client& c, const std::string& n) { return std::make_unique<latch_hold>(c, n); }},
      {"election", false, [](client& c, const std::string& n) { return std::make_unique<plain<election>>(c, n); }},
  };
}

/// Parts a) to c) for every kind: one markdown table.
void per_kind(client& c, connection& admin) {
  std::cout << "| lock kind | held: keys | held: bytes | after a waiter gave up and the release: keys | bytes | "
               "left | fencing_token() and release: keys left | counter bytes | counter PTTL |\n"
               "|---|---|---|---|---|---|---|---|---|\n";
  int index = 0;
  for (const kind_case& k : kinds()) {
    // a) and b): one held lock; then a waiter times out, then the holder releases. Every kind's
    // names are as long ("kind<i>", "kind<i>-f"): the bytes differ by kind, not by key length.
    const std::string name = "kind" + std::to_string(index++);
    auto holder = k.make(c, name);
    holder->hold();
    const auto held = keys_of(admin, name);
    check(!held.empty() && total_bytes(held) > 0, std::string(k.label) + ": a held lock with no key");
    {
      auto waiter = k.make(c, name);
      check(!waiter->wait_for(std::chrono::milliseconds(100)),
            std::string(k.label) + ": the waiter got what the holder keeps");
      holder->release();
    }
    const auto left = keys_of(admin, name);
    for (const key_stat& s : left) {
      if (k.latch) check(s.pttl > 0, std::string(k.label) + ": " + s.key + " left without expiry");
      else check(is_fence(s, name), std::string(k.label) + ": " + s.key + " left after the release");
    }

    // c): the fencing counter alone.
    std::string fence_keys = "n/a", fence_bytes = "n/a", fence_pttl = "n/a";
    const std::string fenced_name = name + "-f";
    auto fenced = k.make(c, fenced_name);
    fenced->hold();
    if (fenced->fence()) {
      fenced->release();
      const auto rest = keys_of(admin, fenced_name);
      check(rest.size() == 1 && is_fence(rest[0], fenced_name),
            std::string(k.label) + ": after fencing_token() and the release, not the counter alone");
      for (const key_stat& s : rest)
        check(s.pttl > 0 && s.pttl <= lock_options{}.fence_lifetime.count(),
              std::string(k.label) + ": " + s.key + " PTTL out of range");
      fence_keys = describe(rest, fenced_name, false);
      fence_bytes = std::to_string(total_bytes(rest));
      fence_pttl = rest.empty() ? "-" : std::to_string(rest[0].pttl) + " ms";
    } else {
      fenced->release();
    }
    std::cout << "| " << k.label << " | " << held.size() << (held.size() > 1 ? " (" + describe(held, name) + ")" : "")
              << " | " << total_bytes(held) << " | " << left.size() << " | " << total_bytes(left) << " | "
              << describe(left, name) << " | " << fence_keys << " | " << fence_bytes << " | " << fence_pttl << " |\n";
    std::cout.flush();
  }
}

/// Locks and unlocks `n` mutex names "<prefix><i>" once each (with one fencing_token() per hold
/// when `fencing`), on `threads` threads sharing the client; returns the seconds it took.
double cycle_names(client& c, const std::string& prefix, std::size_t n, std::size_t threads, bool fencing) {
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> workers;
  std::vector<std::exception_ptr> errors(threads);
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      try {
        for (std::size_t i; (i = next.fetch_add(1)) < n;) {
          mutex m(c, prefix + std::to_string(i));
          m.lock();
          if (fencing) m.fencing_token();
          m.unlock();
        }
      } catch (...) {
        errors[t] = std::current_exception();
      }
    });
  for (auto& w : workers) w.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// Part d): N mutex names, each locked and unlocked once (with or without one fencing_token()
/// per hold); used_memory before and after, and the keys left.
void many_names(client& c, connection& admin, std::size_t n, std::size_t threads, bool fencing) {
  // Before the baseline: the scripts are loaded and the pool's connections all open (neither
  // is per name), then FLUSHALL (synchronous unless lazyfree-lazy-user-flush is set).
  cycle_names(c, "fp-warm-up-", threads * 100, threads, true);
  admin.command({"FLUSHALL"});
  const long long before = used_memory(admin);
  const double seconds = cycle_names(c, "fp-name-", n, threads, fencing);
  const long long after = used_memory(admin);
  const long long keys = admin.command({"DBSIZE"})->integer;
  check(keys == (fencing ? static_cast<long long>(n) : 0), std::string(fencing ? "with" : "without") +
                                                               " fencing: " + std::to_string(keys) + " keys left by " +
                                                               std::to_string(n) + " names");
  char per_name[32];
  std::snprintf(per_name, sizeof per_name, "%.1f", static_cast<double>(after - before) / static_cast<double>(n));
  char elapsed[32];
  std::snprintf(elapsed, sizeof elapsed, "%.1f", seconds);
  std::cout << "| " << (fencing ? "fencing_token() once per hold" : "no fencing token") << " | " << n << " | "
            << after - before << " | " << per_name << " | " << keys << " | " << elapsed << " |\n";
  std::cout.flush();
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t names = 1000000, threads = 4;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--names") && i + 1 < argc) names = std::stoul(argv[++i]);
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::stoul(argv[++i]);
    else {
      std::cerr << "usage: footprint [--names N] [--threads T]\n";
      return 2;
    }
  }
  if (names == 0 || threads == 0) {
    std::cerr << "footprint: --names and --threads must be at least 1\n";
    return 2;
  }
  try {
    redis_server server;
    client_options o;
    o.connection = server.options();
    o.connection.command_timeout = std::chrono::seconds(10);
    o.pool_size = threads;
    client c(o);
    connection admin = server.admin();

    std::cout << "# Server memory per lock\n\nredis_version " << info_field(admin, "server", "redis_version")
              << ", mem_allocator " << info_field(admin, "memory", "mem_allocator")
              << ". Bytes: MEMORY USAGE <key> SAMPLES 0, summed over a name's keys (SCAN MATCH *{<name>}*); names of 5 "
                 "characters (key prefix redislock:), default lock_options. The waiter waits 100 ms.\n\n";
    per_kind(c, admin);

    std::cout << "\nMutex names each locked and unlocked once, " << threads << " threads (FLUSHALL, then INFO memory "
              << "used_memory before and after; the clients' buffers move it by up to ~100 KB either way):\n\n"
                 "| run | names | used_memory delta (bytes) | bytes per name | keys left (DBSIZE) | seconds |\n"
                 "|---|---|---|---|---|---|\n";
    many_names(c, admin, names, threads, false);
    many_names(c, admin, names, threads, true);
  } catch (const std::exception& e) {
    std::cerr << "footprint: " << e.what() << "\n";
    return 1;
  }
  if (!g_failures.empty()) {
    for (const std::string& f : g_failures) std::cerr << "footprint: FAILED: " << f << "\n";
    return 1;
  }
  return 0;
}
