#pragma once
/// @file observe/prometheus.hpp
/// @brief redislock::prometheus_collector — an observer (observe.hpp) that aggregates lock
/// events in the process and renders them in the Prometheus text exposition format (0.0.4).
/// Optional: compiled only where included. Serving the text (an HTTP /metrics handler, a file
/// for node_exporter's textfile collector) is the application's job.
///
///     auto metrics = std::make_shared<redislock::prometheus_collector>(
///         redislock::prometheus_options{{"order:*", "user:*"}});
///     redislock::set_observer(metrics);
///     ...
///     std::string text = metrics->render();  // the body of GET /metrics
///
/// Label `lock` is low-cardinality: a name matching one of the patterns (a '*' matches any run
/// of characters) is counted under the pattern; other names under themselves, up to
/// max_names of them; later ones under "_other". The metric list, units and example queries:
/// docs/observability.md.

#include <redislock/observe.hpp>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace redislock {

struct prometheus_options {
  /// Name patterns folded into one label each, e.g. "order:*" (first match wins).
  std::vector<std::string> patterns;
  /// Distinct names (not matching a pattern) kept as labels; later names count as "_other".
  std::size_t max_names = 100;
  /// Metric name prefix.
  std::string prefix = "redislock_";
  /// Upper bounds (seconds) of the wait-time and hold-time histograms' buckets.
  std::vector<double> wait_buckets{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
  std::vector<double> hold_buckets{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300};
  std::vector<double> renewal_buckets{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1};
};

class prometheus_collector : public lock_observer {
 public:
  explicit prometheus_collector(prometheus_options o = {}) : o_(std::move(o)) {}

  void on_attempt(const attempt_event& e) override {
    std::lock_guard<std::mutex> g(m_);
    series& s = of(e);
    ++s.attempts;
    ++s.waiting;
  }
  void on_acquired(const acquired_event& e) override {
    std::lock_guard<std::mutex> g(m_);
    series& s = of(e);
    ++s.outcomes[0];
    if (s.waiting > 0) --s.waiting;
    if (e.path == acquire_path::handoff) ++s.handoffs;
    s.wait.observe(seconds(e.wait), o_.wait_buckets);
    ++s.held;
  }
  void on_not_acquired(const not_acquired_event& e) override {
    std::lock_guard<std::mutex> g(m_);
    series& s = of(e);
    ++s.outcomes[e.reason == not_acquired_reason::timeout ? 1 : 2];
    if (s.waiting > 0) --s.waiting;
    s.wait.observe(seconds(e.wait), o_.wait_buckets);
  }
  void on_released(const released_event& e) override {
    std::lock_guard<std::mutex> g(m_);
    series& s = of(e);
    ++s.releases[static_cast<std::size_t>(e.status)];
    if (!e.nested && e.held.count() > 0) s.hold.observe(seconds(e.held), o_.hold_buckets);
    if (s.held > 0) --s.held;
  }
  void on_fenced(const fenced_event& e) override {
    std::lock_guard<std::mutex> g(m_);
    ++of(e).fenced;
  }
  void on_woken(const woken_event& e) override {
    std::lock_guard<std::mutex> g(m_);
    ++of(e).wakeups[static_cast<std::size_t>(e.cause)];
  }
  void on_lost(const lost_event& e) override {
    std::lock_guard<std::mutex> g(m_);
    series& s = of(e);
    ++s.lost;
    s.lost_margin = seconds(e.before_end);
  }
  void on_renewed(const renewed_event& e) override {
    std::lock_guard<std::mutex> g(m_);
    renewals_ok_ += e.renewed;
    renewals_failed_ += e.batch - e.renewed;
    renewal_latency_.observe(seconds(e.latency), o_.renewal_buckets);
  }
  void on_reconnected(const reconnected_event& e) override {
    std::lock_guard<std::mutex> g(m_);
    auto& r = reconnects_[std::string(e.endpoint)];
    ++r.first;
    r.second += seconds(e.down_for);
  }
  void on_failover(const failover_event& e) override {
    std::lock_guard<std::mutex> g(m_);
    auto& f = failovers_[std::string(e.topology)];
    ++f.first;
    f.second = seconds(e.recovered_in);
  }

  /// The metrics in the Prometheus text exposition format (Content-Type:
  /// text/plain; version=0.0.4).
  std::string render() const {
    std::lock_guard<std::mutex> g(m_);
    std::string out;
    const std::string& p = o_.prefix;
    family(out, p + "acquire_attempts_total", "counter",
           "Acquisitions started (lock, try_lock and their shared forms).");
    for (const auto& [k, s] : series_) sample(out, p + "acquire_attempts_total", k, "", s.attempts);
    family(out, p + "acquisitions_total", "counter",
           "Acquisitions ended, by outcome: acquired, timeout (deadline passed), error (threw).");
    static const char* outcomes[] = {"acquired", "timeout", "error"};
    for (const auto& [k, s] : series_)
      for (std::size_t i = 0; i < 3; ++i)
        sample(out, p + "acquisitions_total", k, label("outcome", outcomes[i]), s.outcomes[i]);
    family(out, p + "handoffs_total", "counter", "Acquisitions handed over by a release (no attempt after the wait).");
    for (const auto& [k, s] : series_) sample(out, p + "handoffs_total", k, "", s.handoffs);
    family(out, p + "acquire_wait_seconds", "histogram", "Time from the call to its outcome (acquired or not).");
    for (const auto& [k, s] : series_) histogram(out, p + "acquire_wait_seconds", k, s.wait, o_.wait_buckets);
    family(out, p + "hold_seconds", "histogram", "Time from acquisition to release (outermost holds).");
    for (const auto& [k, s] : series_) histogram(out, p + "hold_seconds", k, s.hold, o_.hold_buckets);
    family(out, p + "releases_total", "counter",
           "Releases, by status: released, lease_expired (the lease had run out), failed (Redis unreachable).");
    by_enum(out, p + "releases_total", "status",
            {release_status::released, release_status::lease_expired, release_status::failed}, &series::releases);
    family(out, p + "fencing_tokens_total", "counter", "Fencing tokens drawn (a hold's first fencing_token()).");
    for (const auto& [k, s] : series_) sample(out, p + "fencing_tokens_total", k, "", s.fenced);
    family(out, p + "leases_lost_total", "counter", "Holds whose lease was found lost (once per hold).");
    for (const auto& [k, s] : series_) sample(out, p + "leases_lost_total", k, "", s.lost);
    family(out, p + "lease_lost_margin_seconds", "gauge",
           "For the latest lost lease: how long before its end it was noticed (negative: after).");
    for (const auto& [k, s] : series_)
      if (s.lost > 0) sample(out, p + "lease_lost_margin_seconds", k, "", s.lost_margin);
    family(out, p + "wakeups_total", "counter",
           "Waiters woken, by cause: notice (release), timer (lease end or re-check), fallback (backoff).");
    by_enum(out, p + "wakeups_total", "cause", {wake_cause::notice, wake_cause::timer, wake_cause::fallback},
            &series::wakeups);
    family(out, p + "held", "gauge", "Holds this process has now (nested holds counted each).");
    for (const auto& [k, s] : series_) sample(out, p + "held", k, "", s.held);
    family(out, p + "waiting", "gauge",
           "Acquisitions of this process in progress now (waiting for the lock or its reply).");
    for (const auto& [k, s] : series_) sample(out, p + "waiting", k, "", s.waiting);
    family(out, p + "renewals_total", "counter", "Lease renewals sent by watchdogs, by result: renewed, failed.");
    sample(out, p + "renewals_total", "", label("result", "renewed"), renewals_ok_);
    sample(out, p + "renewals_total", "", label("result", "failed"), renewals_failed_);
    family(out, p + "renewal_batch_seconds", "histogram",
           "Time of one watchdog batch of renewals (send to last reply).");
    histogram(out, p + "renewal_batch_seconds", "", renewal_latency_, o_.renewal_buckets);
    by_key(out, p + "reconnects_total", "counter", "Connections established again after a failure, by endpoint.",
           "endpoint", reconnects_, [](const auto& r) { return static_cast<double>(r.first); });
    by_key(out, p + "reconnect_downtime_seconds_total", "counter",
           "Time connections were down before they were established again, by endpoint.", "endpoint", reconnects_,
           [](const auto& r) { return r.second; });
    by_key(out, p + "failovers_total", "counter", "Moves to a new master, by topology.", "topology", failovers_,
           [](const auto& f) { return static_cast<double>(f.first); });
    by_key(out, p + "failover_recovery_seconds", "gauge",
           "For the latest failover: time from the first failure on the old master to the switch.", "topology",
           failovers_, [](const auto& f) { return f.second; });
    return out;
  }

  /// The `lock` label a name is counted under (see the file comment).
  std::string label_of(std::string_view name) const {
    std::lock_guard<std::mutex> g(m_);
    return fold(name);
  }

  /// True when `name` matches `pattern`, where '*' matches any run of characters.
  static bool matches(std::string_view pattern, std::string_view name) noexcept {
    std::size_t p = 0, n = 0, star = std::string_view::npos, mark = 0;
    while (n < name.size()) {
      if (p < pattern.size() && pattern[p] == '*') {
        star = p++;
        mark = n;
      } else if (p < pattern.size() && pattern[p] == name[n]) {
        ++p;
        ++n;
      } else if (star != std::string_view::npos) {
        p = star + 1;
        n = ++mark;
      } else {
        return false;
      }
    }
    while (p < pattern.size() && pattern[p] == '*') ++p;
    return p == pattern.size();
  }

 private:
  struct histo {
    std::vector<std::uint64_t> counts;  // per bucket (not cumulative); the last: above every bound
    double sum = 0;
    std::uint64_t count = 0;
    void observe(double v, const std::vector<double>& bounds) {
      if (counts.empty()) counts.assign(bounds.size() + 1, 0);
      std::size_t i = 0;
      while (i < bounds.size() && v > bounds[i]) ++i;
      ++counts[i];
      sum += v;
      ++count;
    }
  };
  struct series {
    std::uint64_t attempts = 0, handoffs = 0, lost = 0, fenced = 0;
    std::array<std::uint64_t, 3> outcomes{};  // acquired, timeout, error
    std::array<std::uint64_t, 4> releases{};  // by release_status
    std::array<std::uint64_t, 3> wakeups{};   // by wake_cause
    std::int64_t held = 0, waiting = 0;
    double lost_margin = 0;
    histo wait, hold;
  };

  // One sample per series and value of an enum (label `key`), from the series' counts by value.
  template <class Enum, std::size_t N>
  void by_enum(std::string& out, const std::string& name, const char* key, std::initializer_list<Enum> values,
               std::array<std::uint64_t, N> series::*counts) const {
    for (const auto& [k, s] : series_)
      for (Enum v : values)
        sample(out, name, k, label(key, to_string(v)), static_cast<double>((s.*counts)[static_cast<std::size_t>(v)]));
  }

  // A family with one sample per key of `m` (label `key`), valued value(m's value).
  template <class Map, class Value>
  static void by_key(std::string& out, const std::string& name, const char* type, const char* help, const char* key,
                     const Map& m, Value&& value) {
    family(out, name, type, help);
    for (const auto& [k, v] : m) sample(out, name, label(key, k), "", value(v));
  }

  static double seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

  // The series of an event's lock (label), kind and mode; under m_. Names seen are cached
  // with their series (up to kMaxCachedNames: more distinct names are folded on every event).
  series& of(const lock_event& e) {
    const std::size_t slot = static_cast<std::size_t>(e.kind) * 2 + (e.mode == lock_mode::shared ? 1 : 0);
    auto it = names_.find(std::string(e.name));
    if (it == names_.end()) {
      name_entry n;
      n.label = fold(e.name);
      const bool own = n.label == e.name;
      if (names_.size() >= kMaxCachedNames) return series_[series_key(own ? std::string("_other") : n.label, e)];
      own_names_ += own ? 1 : 0;
      it = names_.emplace(std::string(e.name), std::move(n)).first;
    }
    series*& cached = it->second.series_of[slot];
    if (cached == nullptr) cached = &series_[series_key(it->second.label, e)];
    return *cached;
  }
  static std::string series_key(const std::string& lock_label, const lock_event& e) {
    return label("lock", lock_label) + "," + label("kind", to_string(e.kind)) + "," + label("mode", to_string(e.mode));
  }

  std::string fold(std::string_view name) const {
    for (const std::string& p : o_.patterns)
      if (matches(p, name)) return p;
    const auto it = names_.find(std::string(name));
    if (it != names_.end()) return it->second.label;
    return own_names_ < o_.max_names ? std::string(name) : std::string("_other");
  }

  static std::string label(std::string_view key, std::string_view value) {
    std::string out(key);
    out += "=\"";
    for (char c : value) {
      if (c == '\\') out += "\\\\";
      else if (c == '"') out += "\\\"";
      else if (c == '\n') out += "\\n";
      else out += c;
    }
    out += '"';
    return out;
  }
  static void family(std::string& out, const std::string& name, const char* type, const char* help) {
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  static std::string number(double v) {
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return buf;
  }
  static void sample(std::string& out, const std::string& name, const std::string& labels, const std::string& extra,
                     double value) {
    out += name;
    if (!labels.empty() || !extra.empty()) {
      out += '{';
      out += labels;
      if (!labels.empty() && !extra.empty()) out += ',';
      out += extra;
      out += '}';
    }
    out += ' ';
    out += number(value);
    out += '\n';
  }
  static void histogram(std::string& out, const std::string& name, const std::string& labels, const histo& h,
                        const std::vector<double>& bounds) {
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i <= bounds.size(); ++i) {
      cumulative += h.counts.empty() ? 0 : h.counts[i];
      const std::string le = i < bounds.size() ? number(bounds[i]) : std::string("+Inf");
      sample(out, name + "_bucket", labels, label("le", le), static_cast<double>(cumulative));
    }
    sample(out, name + "_sum", labels, "", h.sum);
    sample(out, name + "_count", labels, "", static_cast<double>(h.count));
  }

  prometheus_options o_;
  mutable std::mutex m_;
  static constexpr std::size_t kMaxCachedNames = 4096;
  struct name_entry {
    std::string label;                                // its `lock` label
    std::array<series*, 2 * kLockTypes> series_of{};  // by kind and mode (std::map nodes do not move)
  };
  std::unordered_map<std::string, name_entry> names_;  // lock name -> its label and series
  std::size_t own_names_ = 0;                          // names_ counted under themselves
  std::map<std::string, series> series_;               // by label set
  std::uint64_t renewals_ok_ = 0, renewals_failed_ = 0;
  histo renewal_latency_;
  std::map<std::string, std::pair<std::uint64_t, double>> reconnects_;  // endpoint -> count, downtime
  std::map<std::string, std::pair<std::uint64_t, double>> failovers_;   // topology -> count, last recovery
};

}  // namespace redislock
