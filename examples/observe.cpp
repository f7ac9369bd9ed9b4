// Observing locks: metrics in the Prometheus text format, and one trace span per acquisition
// and per hold forwarded to a tracer of your own (OpenTelemetry's, in a real program: see
// docs/observability.md). Four threads contend for three names; the metrics are printed at
// the end (docs/observability.md shows this program's output).
// Usage: observe [redis://host:port]   (default: $REDISLOCK_URL, then redis://127.0.0.1:6379)
#include <redislock/observe/prometheus.hpp>
#include <redislock/redislock.hpp>
#include "server_url.hpp"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

// ---- your tracer: a stand-in with OpenTelemetry's shape (start a span, set attributes, end) ----
struct span {
  std::string name;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::map<std::string, std::string> attributes;
};
class tracer {
 public:
  std::unique_ptr<span> start_span(std::string name) {
    auto s = std::make_unique<span>();
    s->name = std::move(name);
    return s;
  }
  void end(std::unique_ptr<span> s) {  // an exporter would send it; we count and keep the last
    std::lock_guard<std::mutex> g(m_);
    ++ended_[s->name];
    last_[s->name] = std::move(s);
  }
  void print(std::ostream& out) {
    std::lock_guard<std::mutex> g(m_);
    for (const auto& [name, n] : ended_) {
      out << "# spans " << name << ": " << n << ", the last:";
      for (const auto& [k, v] : last_[name]->attributes) out << " " << k << "=" << v;
      out << "\n";
    }
  }

 private:
  std::mutex m_;
  std::map<std::string, int> ended_;
  std::map<std::string, std::unique_ptr<span>> last_;
};

// ---- the forwarding observer: one "lock.acquire" span per acquisition, one "lock.hold" per hold ----
class span_forwarder : public redislock::lock_observer {
 public:
  explicit span_forwarder(tracer& t) : tracer_(t) {}

  // An acquisition's events all arrive on its thread: its span waits in a thread_local slot.
  void on_attempt(const redislock::attempt_event& e) override {
    auto s = tracer_.start_span("lock.acquire");
    describe(*s, e);
    acquiring() = std::move(s);
  }
  void on_acquired(const redislock::acquired_event& e) override {
    if (auto s = std::move(acquiring())) {
      s->attributes["lock.outcome"] = "acquired";
      s->attributes["lock.path"] = to_string(e.path);
      s->attributes["lock.attempts"] = std::to_string(e.attempts);
      tracer_.end(std::move(s));
    }
    std::lock_guard<std::mutex> g(m_);
    if (holds_.count(e.hold) != 0) return;  // a nested hold: the outermost's span covers it
    auto hold = tracer_.start_span("lock.hold");
    describe(*hold, e);
    holds_[e.hold] = std::move(hold);
  }
  void on_not_acquired(const redislock::not_acquired_event& e) override {
    if (auto s = std::move(acquiring())) {
      s->attributes["lock.outcome"] = to_string(e.reason);
      if (!e.error.empty()) s->attributes["exception.message"] = std::string(e.error);
      tracer_.end(std::move(s));
    }
  }
  // A release may come from another thread than the acquisition (a mutex), and the next
  // holder's acquisition may be reported before it: holds are found by their number.
  void on_released(const redislock::released_event& e) override {
    if (e.nested) return;
    std::unique_ptr<span> s;
    {
      std::lock_guard<std::mutex> g(m_);
      auto it = holds_.find(e.hold);
      if (it == holds_.end()) return;
      s = std::move(it->second);
      holds_.erase(it);
    }
    s->attributes["lock.release_status"] = to_string(e.status);
    tracer_.end(std::move(s));
  }
  // The hold's token goes on its span: a write a downstream store refused names its hold.
  void on_fenced(const redislock::fenced_event& e) override {
    std::lock_guard<std::mutex> g(m_);
    auto it = holds_.find(e.hold);
    if (it != holds_.end()) it->second->attributes["lock.fencing_token"] = std::to_string(e.token);
  }
  void on_lost(const redislock::lost_event& e) override {  // a span of its own, without duration
    auto s = tracer_.start_span("lock.lost");
    describe(*s, e);
    s->attributes["lock.lost.before_end_ms"] =
        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(e.before_end).count());
    tracer_.end(std::move(s));
  }

 private:
  static void describe(span& s, const redislock::lock_event& e) {
    s.attributes["lock.name"] = std::string(e.name);
    s.attributes["lock.kind"] = to_string(e.kind);
    s.attributes["lock.mode"] = to_string(e.mode);
  }
  static std::unique_ptr<span>& acquiring() {
    thread_local std::unique_ptr<span> s;
    return s;
  }
  tracer& tracer_;
  std::mutex m_;
  std::map<std::uint64_t, std::unique_ptr<span>> holds_;  // by hold number
};

// One observer is installed per process: this one passes every event to both.
class fan_out : public redislock::lock_observer {
 public:
  fan_out(std::shared_ptr<redislock::lock_observer> a, std::shared_ptr<redislock::lock_observer> b)
      : a_(std::move(a)), b_(std::move(b)) {}
  void on_attempt(const redislock::attempt_event& e) override { a_->on_attempt(e), b_->on_attempt(e); }
  void on_acquired(const redislock::acquired_event& e) override { a_->on_acquired(e), b_->on_acquired(e); }
  void on_not_acquired(const redislock::not_acquired_event& e) override {
    a_->on_not_acquired(e), b_->on_not_acquired(e);
  }
  void on_released(const redislock::released_event& e) override { a_->on_released(e), b_->on_released(e); }
  void on_fenced(const redislock::fenced_event& e) override { a_->on_fenced(e), b_->on_fenced(e); }
  void on_woken(const redislock::woken_event& e) override { a_->on_woken(e), b_->on_woken(e); }
  void on_renewed(const redislock::renewed_event& e) override { a_->on_renewed(e), b_->on_renewed(e); }
  void on_lost(const redislock::lost_event& e) override { a_->on_lost(e), b_->on_lost(e); }
  void on_reconnected(const redislock::reconnected_event& e) override { a_->on_reconnected(e), b_->on_reconnected(e); }
  void on_failover(const redislock::failover_event& e) override { a_->on_failover(e), b_->on_failover(e); }

 private:
  std::shared_ptr<redislock::lock_observer> a_, b_;
};

int main(int argc, char** argv) {
  const char* uri = argc > 1 ? argv[1] : server_url_from_env();
  redislock::client redis(uri ? uri : "redis://127.0.0.1:6379");

  redislock::prometheus_options options;
  options.patterns = {"order:*"};  // one `lock` label for every order, however many there are
  auto metrics = std::make_shared<redislock::prometheus_collector>(options);
  tracer spans;
  redislock::set_observer(std::make_shared<fan_out>(metrics, std::make_shared<span_forwarder>(spans)));

  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&redis, w] {
      redislock::lock_options o;
      o.lease = std::chrono::milliseconds(300);
      o.auto_renew = w == 0;  // one worker's holds are renewed by the watchdog (every 100 ms)
      redislock::mutex order(redis, "order:" + std::to_string(w % 2), o);
      redislock::shared_mutex report(redis, "report");
      if (w == 0) {  // a long hold first: renewed twice while the others time out
        std::lock_guard<redislock::mutex> g(order);
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
      }
      for (int i = 0; i < 25; ++i) {
        if (order.try_lock_for(std::chrono::milliseconds(10))) {
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          order.unlock();
        }
        if (w == 1) {  // one writer, three readers; the writer draws a fencing token per hold
          std::lock_guard<redislock::shared_mutex> g(report);
          report.fencing_token();
        } else {
          std::shared_lock<redislock::shared_mutex> g(report);
        }
      }
    });
  }
  for (auto& t : workers) t.join();
  redislock::set_observer(nullptr);

  std::cout << metrics->render();
  spans.print(std::cout);
}
