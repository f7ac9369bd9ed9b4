#pragma once
/// @file detail/quorum.hpp
/// @brief Sending one command to N independent Redis servers at once and collecting their
/// answers, each bounded by a short per-instance timeout (basic_redlock's transport).
///
/// Every server has its own thread (instance_thread) that runs that server's commands in
/// order. A round posts one job to every thread and the caller waits until the answers decide
/// the outcome or the per-instance timeout passes, whichever comes first: a stalled server
/// (SIGSTOP, a partition) therefore delays the caller by at most that timeout, never by the
/// client's own timeouts. While the command runs, the hiredis timeout of the borrowed
/// connection is the per-instance timeout, so the thread is freed soon after too; what it may
/// still wait for (the pool, a reconnect) only delays that server's later jobs.
///
/// Ordering: jobs of one server run in the order they were posted, so a release posted after
/// an acquire always reaches that server after the acquire (or finds it was never sent).

#include <redislock/connection.hpp>
#include <redislock/errors.hpp>

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace redislock::detail {

/// One server's worker thread: runs posted jobs one after another. Its destructor runs what
/// is still queued (releases must reach the server), then joins.
class instance_thread {
 public:
  instance_thread() : thread_([this] { loop(); }) {}
  instance_thread(const instance_thread&) = delete;
  instance_thread& operator=(const instance_thread&) = delete;
  ~instance_thread() {
    {
      std::lock_guard<std::mutex> g(m_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

  void post(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> g(m_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> g(m_);
    for (;;) {
      cv_.wait(g, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and everything queued has run
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      g.unlock();
      job();  // jobs catch their own exceptions
      g.lock();
    }
  }

  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

/// What one server answered in a round.
enum class answer : unsigned char {
  pending,  ///< no answer yet (or none within the per-instance timeout)
  yes,      ///< the command did what was asked (acquired, deleted, extended, ...)
  no,       ///< the server answered that it did not (held by another, not ours)
  failed,   ///< an error: connection, timeout, error reply (or a refusal the op reports so)
  skipped,  ///< not sent: the round was closed before it started, or nothing to do there
};

/// Counts of one round's answers.
struct tally {
  std::size_t yes = 0, no = 0, failed = 0, skipped = 0, pending = 0;
  std::size_t answered() const noexcept { return yes + no; }
};

/// One round: a command sent to every server, answered by their threads. Shared with the
/// jobs, so a caller that stopped waiting leaves nothing dangling.
class round {
 public:
  round(std::size_t n, std::chrono::steady_clock::time_point stale_after)
      : answers_(n, answer::pending), values_(n, 0), sent_(n, false), stale_after_(stale_after) {}

  /// Waits until decided(tally) holds or `until` passes; returns the answers so far. Jobs not
  /// yet answered go on (their answers land here later).
  template <class Decided>
  tally wait(std::chrono::steady_clock::time_point until, Decided decided) {
    std::unique_lock<std::mutex> g(m_);
    cv_.wait_until(g, until, [&] { return decided(count()); });
    return count();
  }

  /// The caller no longer wants this round: skippable jobs that have not started are skipped.
  void close() {
    std::lock_guard<std::mutex> g(m_);
    closed_ = true;
  }

  /// Answers and values as they are now (call after wait()).
  answer answer_of(std::size_t i) const {
    std::lock_guard<std::mutex> g(m_);
    return answers_[i];
  }
  std::int64_t value_of(std::size_t i) const {
    std::lock_guard<std::mutex> g(m_);
    return values_[i];
  }
  /// Whether the command was (possibly) written to server i; final once a later job of that
  /// server runs.
  bool sent_to(std::size_t i) const {
    std::lock_guard<std::mutex> g(m_);
    return sent_[i];
  }
  /// The first failure, typed as thrown (null when none).
  std::exception_ptr first_error() const {
    std::lock_guard<std::mutex> g(m_);
    return error_;
  }

  // Called by the jobs. A skippable job that starts after the round was closed, or after the
  // caller's wait ended (its server's thread was stuck), is stale: skipped, so a stuck server's
  // queue drains at once when it comes back instead of replaying every missed round.
  bool start(std::size_t i, bool skippable) {
    std::lock_guard<std::mutex> g(m_);
    if (skippable && (closed_ || std::chrono::steady_clock::now() > stale_after_)) return false;
    sent_[i] = true;
    return true;
  }
  void finish(std::size_t i, answer a, std::int64_t value, std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> g(m_);
      answers_[i] = a;
      values_[i] = value;
      if (e && !error_) error_ = std::move(e);
    }
    cv_.notify_all();
  }

 private:
  tally count() const {
    tally t;
    for (answer a : answers_) {
      switch (a) {
        case answer::yes: ++t.yes; break;
        case answer::no: ++t.no; break;
        case answer::failed: ++t.failed; break;
        case answer::skipped: ++t.skipped; break;
        case answer::pending: ++t.pending; break;
      }
    }
    return t;
  }

  mutable std::mutex m_;
  std::condition_variable cv_;
  std::vector<answer> answers_;
  std::vector<std::int64_t> values_;
  std::vector<bool> sent_;
  std::exception_ptr error_;
  std::chrono::steady_clock::time_point stale_after_;
  bool closed_ = false;
};

/// Sets a connection's hiredis send/receive timeout for one command and restores the
/// connection's own afterwards (a connection that failed is closed anyway).
class command_timeout_scope {
 public:
  command_timeout_scope(connection& c, std::chrono::milliseconds t) : c_(c) {
    c_.ensure_ready();  // a reconnect sets the connection's own timeout: set ours after it
    set(t);
  }
  command_timeout_scope(const command_timeout_scope&) = delete;
  command_timeout_scope& operator=(const command_timeout_scope&) = delete;
  ~command_timeout_scope() {
    if (c_.native_handle() != nullptr && !c_.broken()) {
      try {
        set(c_.options().command_timeout);
      } catch (...) {
        c_.close();  // it would keep the short timeout: drop it, the next use reconnects
      }
    }
  }

 private:
  void set(std::chrono::milliseconds t) {
    timeval tv{};
    tv.tv_sec = static_cast<decltype(tv.tv_sec)>(t.count() / 1000);
    tv.tv_usec = static_cast<decltype(tv.tv_usec)>((t.count() % 1000) * 1000);
    if (redisSetTimeout(c_.native_handle(), tv) != REDIS_OK)
      throw connection_error("cannot set a timeout on " + c_.options().endpoint());
  }
  connection& c_;
};

/// N independent servers, each reached through its own Client and its own thread.
template <class Client>
class quorum {
 public:
  /// What a round runs on server i: returns the answer and may set a value.
  using operation = std::function<answer(std::size_t i, connection&, std::int64_t& value)>;
  /// Decides on the server's thread, just before sending, whether server i needs the command
  /// at all (false: skipped).
  using filter = std::function<bool(std::size_t i)>;

  quorum(std::vector<Client*> clients, std::chrono::milliseconds instance_timeout)
      : clients_(std::move(clients)), timeout_(instance_timeout) {
    threads_.reserve(clients_.size());
    for (std::size_t i = 0; i < clients_.size(); ++i) threads_.push_back(std::make_unique<instance_thread>());
  }

  std::size_t size() const noexcept { return clients_.size(); }
  /// Master i's client, for a call outside the rounds (an error's diagnosis).
  Client& client(std::size_t i) const noexcept { return *clients_[i]; }
  /// A majority: N/2 + 1.
  std::size_t needed() const noexcept { return clients_.size() / 2 + 1; }
  std::chrono::milliseconds instance_timeout() const noexcept { return timeout_; }

  /// Posts `op` to every server. A skippable command is not sent once the round was closed
  /// (round::close()) or the per-instance timeout has passed (its thread was busy); one that
  /// must arrive (a release) never is skipped, though `wanted` may rule it out.
  std::shared_ptr<round> send(const std::string& route_key, operation op, bool skippable, filter wanted = {}) {
    auto r = std::make_shared<round>(clients_.size(), std::chrono::steady_clock::now() + timeout_);
    auto shared_op = std::make_shared<operation>(std::move(op));
    auto shared_filter = std::make_shared<filter>(std::move(wanted));
    for (std::size_t i = 0; i < clients_.size(); ++i) {
      threads_[i]->post([r, shared_op, shared_filter, i, skippable, route_key, client = clients_[i], t = timeout_] {
        if ((*shared_filter && !(*shared_filter)(i)) || !r->start(i, skippable)) {
          r->finish(i, answer::skipped, 0, nullptr);
          return;
        }
        answer a = answer::failed;
        std::int64_t value = 0;
        std::exception_ptr e;
        try {
          a = client->run(route_key, [&](connection& c) {
            command_timeout_scope scope(c, t);
            return (*shared_op)(i, c, value);
          });
        } catch (...) {
          e = std::current_exception();
          a = answer::failed;
        }
        r->finish(i, a, value, std::move(e));
      });
    }
    return r;
  }

 private:
  std::vector<Client*> clients_;
  std::chrono::milliseconds timeout_;
  std::vector<std::unique_ptr<instance_thread>> threads_;  // last: joined first
};

}  // namespace redislock::detail
