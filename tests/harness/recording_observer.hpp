#pragma once
// An observer (observe.hpp) that records every event as one line, for tests.

#include <redislock/observe.hpp>

#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace redislock_test {

using namespace redislock;

// Records every event as one line "<event> <name> <details>".
struct recorder : lock_observer {
  void on_attempt(const attempt_event& e) override { add("attempt", e, e.may_wait ? "wait" : "try"); }
  void on_acquired(const acquired_event& e) override {
    add("acquired", e, std::string(to_string(e.path)) + " attempts=" + std::to_string(e.attempts));
    std::lock_guard<std::mutex> g(m);
    if (e.hold == 0) lines.push_back("bad_hold_number");
    open_holds.insert(e.hold);
  }
  void on_not_acquired(const not_acquired_event& e) override { add("not_acquired", e, to_string(e.reason)); }
  void on_released(const released_event& e) override {
    add("released", e, std::string(to_string(e.status)) + (e.nested ? " nested" : ""));
    if (e.held.count() <= 0 && !e.nested) add("bad_hold_time", e, "");
    std::lock_guard<std::mutex> g(m);
    if (open_holds.count(e.hold) == 0) lines.push_back("bad_hold_pair");  // released a hold never acquired
    if (!e.nested) open_holds.erase(e.hold);
  }
  void on_fenced(const fenced_event& e) override {
    add("fenced", e, "token=" + std::to_string(e.token));
    std::lock_guard<std::mutex> g(m);
    if (open_holds.count(e.hold) == 0) lines.push_back("bad_fence_hold");  // not the hold that drew it
  }
  void on_woken(const woken_event& e) override { add("woken", e, to_string(e.cause)); }
  void on_lost(const lost_event& e) override { add("lost", e, ""); }
  void on_renewed(const renewed_event& e) override {
    std::lock_guard<std::mutex> g(m);
    lines.push_back("renewed - " + std::to_string(e.renewed) + "/" + std::to_string(e.batch));
  }
  void on_reconnected(const reconnected_event& e) override {
    std::lock_guard<std::mutex> g(m);
    lines.push_back("reconnected " + std::string(e.endpoint));
  }
  void on_failover(const failover_event& e) override {
    std::lock_guard<std::mutex> g(m);
    lines.push_back("failover " + std::string(e.from) + " " + std::string(e.to));
  }

  void add(const char* what, const lock_event& e, const std::string& details) {
    std::lock_guard<std::mutex> g(m);
    lines.push_back(std::string(what) + " " + std::string(e.name) + " " + to_string(e.kind) + "/" + to_string(e.mode) +
                    (details.empty() ? "" : " " + details));
  }
  // Lines starting with `prefix`.
  int count(const std::string& prefix) {
    std::lock_guard<std::mutex> g(m);
    int n = 0;
    for (const auto& l : lines) n += l.rfind(prefix, 0) == 0;
    return n;
  }
  std::vector<std::string> snapshot() {
    std::lock_guard<std::mutex> g(m);
    return lines;
  }
  std::mutex m;
  std::vector<std::string> lines;
  std::set<std::uint64_t> open_holds;  // acquired, not released yet
};

}  // namespace redislock_test
