#pragma once
// The async mutex (redislock/asio.hpp) as a model subject: an ordinary subject whose calls the
// checker's thread makes and waits for, while one io_context thread per run (async_runtime)
// drives every async client. Its holds are recorded in the same history as the blocking
// kinds', so async and blocking holders of one name are checked together. Built only with
// asio (REDISLOCK_MODEL_ASYNC: tests/model/CMakeLists.txt).
//
// The async API's members map onto the subject's: try_lock is async_try_lock_for(0), lock is
// async_lock, still_held asks async_remaining_lease (there is no async still_held), and
// remaining() reports the larger of async_remaining_lease and what lease_confirmed_until()
// promises from the call's start: the optimism check then holds both to the server's state
// (and the lease_clock check lease_confirmed_until() itself: model.cpp).
// Extreme durations (subjects.hpp): lock becomes async_try_lock_for(max()) of several periods,
// try_lock async_try_lock_for(0) of them, for a third of the calls.
//
// broken_async_extend (a self-test): lease_confirmed_until() keeps the later of the ends before
// and after a confirmed extend, as the async hold did before the lease clock (issue 39, item
// 1): a shorter extend then leaves it believing in more than the server keeps.

#include "subjects.hpp"

#include <redislock/asio.hpp>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>

#include <future>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

namespace redislock_model {

/// An io_context and the one thread that runs it, for a run's async clients. Destroy the
/// clients first: it then waits (bounded) for the releases they still send.
class async_runtime {
 public:
  async_runtime() : work_(asio::make_work_guard(io_)), thread_([this] { run(); }) {}
  async_runtime(const async_runtime&) = delete;
  async_runtime& operator=(const async_runtime&) = delete;
  ~async_runtime() {
    work_.reset();
    if (ended_future_.wait_for(std::chrono::seconds(5)) != std::future_status::ready) io_.stop();
    thread_.join();
  }
  asio::any_io_executor executor() { return io_.get_executor(); }

 private:
  void run() {
    io_.run();
    ended_.set_value();
  }
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::promise<void> ended_;
  std::future<void> ended_future_ = ended_.get_future();
  std::thread thread_;  // last: it starts once the rest is built
};

/// async_errc::server_error (WRONGTYPE from another kind's key, in the model): the checker
/// counts it as the async mutex's wrong_type_error.
class async_server_error : public redislock::reply_error {
 public:
  using redislock::reply_error::reply_error;
};

class async_mutex_subject : public subject {
 public:
  async_mutex_subject(redislock::async_client& c, const std::string& name, const redislock::lock_options& o)
      : mutex_(c, name, o) {}

  bool acquire(acquire_mode mode, milliseconds timeout, bool) override {
    const int variant = std::exchange(variant_, 0);
    const bool extreme = variant > 0 && mode != acquire_mode::try_for, zero = mode == acquire_mode::try_once;
    auto [e, h] = wait<redislock::async_hold>([&](auto done) {
      if (extreme) with_extreme(variant, zero, [&](auto d) { mutex_.async_try_lock_for(d, std::move(done)); });
      else if (mode == acquire_mode::block) mutex_.async_lock(std::move(done));
      else mutex_.async_try_lock_for(zero ? milliseconds(0) : timeout, std::move(done));
    });
    raise(e);
    hold_ = std::move(h);
    if (extreme && !zero && !hold_.owns_lock())
      extreme_failure_ = "async_try_lock_for(" + extreme_name(variant, zero) + ") completed without the lock";
    return hold_.owns_lock();
  }
  bool extend(milliseconds lease) override {
    auto [e, ok] = wait<bool>([&](auto done) { hold_.async_extend(lease, std::move(done)); });
    raise(e);
    return ok;
  }
  std::uint64_t fencing_token() override {
    auto [e, token] = wait<std::uint64_t>([&](auto done) { hold_.async_fencing_token(std::move(done)); });
    raise(e);
    return token;
  }
  bool still_held() override { return server_remaining().count() > 0; }
  milliseconds remaining() override {
    const auto start = std::chrono::steady_clock::now();
    const auto confirmed = confirmed_until();
    const milliseconds server = server_remaining();
    if (!confirmed || *confirmed <= start) return server;
    return std::max(server, std::chrono::floor<milliseconds>(*confirmed - start));
  }
  redislock::release_status unlock() override {
    auto [e, status] = wait<redislock::release_status>([&](auto done) { hold_.async_unlock(std::move(done)); });
    return e ? redislock::release_status::failed : status;
  }
  bool owns() const override { return hold_.owns_lock(); }
  bool lost() const override { return hold_.lost(); }
  std::string owner() const override { return hold_.token(); }
  std::optional<std::chrono::steady_clock::time_point> confirmed_until() const override {
    return hold_.lease_confirmed_until();
  }

 protected:
  redislock::async_hold& current_hold() { return hold_; }

 private:
  // Starts an async call with a completion that hands (error, value) to this thread, and
  // waits for it. The call always completes: a hang is the run's timeout (model.cpp).
  template <class T, class Start>
  static std::pair<std::error_code, T> wait(Start&& start) {
    auto result = std::make_shared<std::promise<std::pair<std::error_code, T>>>();
    auto done = result->get_future();
    start([result](std::error_code e, T value) { result->set_value({e, std::move(value)}); });
    return done.get();
  }
  milliseconds server_remaining() {
    auto [e, left] = wait<milliseconds>([&](auto done) { hold_.async_remaining_lease(std::move(done)); });
    raise(e);
    return left;
  }
  static void raise(std::error_code e) {
    if (!e) return;
    if (e == redislock::async_errc::connection_failed) throw redislock::connection_error(e.message());
    if (e == redislock::async_errc::server_error) throw async_server_error(e.message());
    if (e == redislock::async_errc::lease_lost) throw redislock::lock_error(e.message());
    throw redislock::error(e.message());
  }

  redislock::async_mutex mutex_;
  redislock::async_hold hold_;  // after the mutex: destroyed first (released in the background)
};

/// Test-only (a self-test's subject): the async mutex whose lease_confirmed_until() keeps the
/// later end when a confirmed extend shortens it (issue 39, item 1, put back without a library
/// edit).
class async_extend_max_subject final : public async_mutex_subject {
 public:
  using async_mutex_subject::async_mutex_subject;
  bool acquire(acquire_mode mode, milliseconds timeout, bool write) override {
    kept_.reset();
    return async_mutex_subject::acquire(mode, timeout, write);
  }
  bool extend(milliseconds lease) override {
    const auto before = confirmed_until();
    const bool ok = async_mutex_subject::extend(lease);
    if (ok && before && (!kept_ || *before > *kept_)) kept_ = before;
    return ok;
  }
  std::optional<std::chrono::steady_clock::time_point> confirmed_until() const override {
    const auto real = async_mutex_subject::confirmed_until();
    if (!real || !kept_) return real;
    return std::max(*real, *kept_);
  }
  // Not lost by the clock while the kept end is ahead (the old hold's lost() read that end).
  bool lost() const override {
    return async_mutex_subject::lost() && !(kept_ && std::chrono::steady_clock::now() < *kept_);
  }

 private:
  std::optional<std::chrono::steady_clock::time_point> kept_;
};

}  // namespace redislock_model
