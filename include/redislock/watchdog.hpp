#pragma once
/// @file watchdog.hpp
/// @brief redislock::watchdog — one background thread per client that keeps renewing the
/// leases of held locks that asked for it (lock_options::auto_renew), in pipelined batches.
///
/// Any lock kind plugs in: it registers a renewal_request (its owner-checked extend script
/// with KEYS/ARGV, replying 1 renewed / 0 not ours) after acquiring, and drops the returned
/// registration before releasing. A hold that is not renewed but asked to be told when its
/// lease runs out (lock_options::on_lost without auto_renew) registers a watch instead: no
/// extend script, no renewals; the hold counts its own lease (detail/lease_clock.hpp), tells
/// the watch its end (registration::lasts_until), and on_lost runs on this thread once that
/// end has passed. One thread per client serves every renewal and watch.
///
/// Schedule: a lease set at time C (the local send time of the command that set it) is
/// renewed at C + lease/3 and may be renewed from C + lease/6 on, so a wake-up takes every
/// renewal that is nearly due and they travel together. All renewals taken in one go are
/// grouped by server and each group is sent as one pipeline of at most max_batch EVALSHAs
/// (NOSCRIPT: SCRIPT LOAD, then one more pipeline of the refused ones). A renewal whose
/// script is an owner-checked PEXPIRE alone (renewal_request::as_set_ifeq) is sent as
/// `SET key token IFEQ token PX lease` where the server has it (Redis 8.4+, Valkey 8.1+): no
/// script, and the server's cheapest owner-checked renewal (docs/servers.md). SET is refused
/// over maxmemory (noeviction) where the script is not: a SET IFEQ refused with OOM goes again
/// as the script, in the same round, when the connection runs scripts.
///
/// An extend() of a renewed hold (registration::hold_back) is sent by the lock itself while
/// the hold's renewals are held back (one in flight is answered first): no renewal races it.
/// Its lease is what the renewals send afterwards, and a confirmed extend restarts C. A
/// command of the hold that got no answer may still run later, after a confirmed one, and set
/// its own lease then: while such a command's lease is shorter, C counts with that one.
///
/// Loss: a renewal answered 0 means the lock is no longer ours. Renewals that fail
/// (connection errors, error replies) are retried every lease/10 until C + lease; from then
/// on the server may have expired the key, so the lease is declared lost (conservative: the
/// server set the lease when it ran the command, at or after C). A lost lease sets the lock's
/// lost flag, calls its on_lost callback (on this thread) and is no longer renewed.
///
/// A silent server (a black hole: nothing answers, nothing is refused) must not delay that:
///  - each lock's valid_until is C + lease, so its lost() turns true on time by the clock
///    alone, whatever this thread is doing;
///  - a pipeline waits for replies at most until the earliest C + lease among its own leases
///    (never longer than the command timeout, never shorter than their retry interval), so
///    this thread is free to report that lease then;
///  - a server that failed a pipeline is not sent to again for lease/10: the rest of its due
///    renewals fail at once instead of each batch waiting out a timeout in turn;
///  - a release does not wait for a renewal in flight (only for a callback running).
/// So on one silent server, on_lost runs at C + lease plus what a reconnect may take (connect
/// timeout, AUTH/SELECT, a pool wait) and the time to run the callbacks before it, however
/// many leases there are; a pipeline to another silent server may add one command timeout.
///
/// Locking: the deadline heap and every entry's state are guarded by one mutex; network I/O
/// and callbacks run outside it, on entries marked in flight.

#include <redislock/connection.hpp>
#include <redislock/detail/lease_clock.hpp>
#include <redislock/detail/observe_hooks.hpp>
#include <redislock/detail/plain_key_commands.hpp>
#include <redislock/errors.hpp>
#include <redislock/reply.hpp>
#include <redislock/script.hpp>
#include <redislock/stats.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace redislock {

/// What a lock kind hands the watchdog to renew one acquisition.
struct renewal_request {
  std::string name;       ///< the lock's name, passed to on_lost
  std::string route_key;  ///< the key the client routes by (the lock's keys share its hash tag)
  /// Owner-checked; replies 1 renewed, 0 not ours. Must outlive the registration. None: a
  /// watch (no renewals; on_lost once the end given by registration::lasts_until passes).
  const script* extend = nullptr;
  std::vector<std::string> keys;       ///< KEYS of `extend`
  std::vector<std::string> args;       ///< ARGV of `extend`
  std::chrono::milliseconds lease{0};  ///< the lease the acquisition set; renewals every lease/3
  /// Where `args` holds the lease in milliseconds, so that an extend() to another lease
  /// (registration::pause) changes what the renewals send. npos: the lease cannot change.
  std::size_t lease_arg = static_cast<std::size_t>(-1);
  /// The script does exactly what `SET keys[0] args[0] IFEQ args[0] PX args[1]` does (an
  /// owner-checked PEXPIRE of a string key holding the owner's token, nothing else): where the
  /// server has SET IFEQ (detail/server_features.hpp), that command is sent instead.
  bool as_set_ifeq = false;
  /// Local send time of the command that set the current lease (the acquisition). Default: now.
  std::chrono::steady_clock::time_point confirmed{};
  /// Set to true when the lease is found lost. Must stay valid until the registration is reset.
  std::atomic<bool>* lost_flag = nullptr;
  /// Optional: set to (send time of the last confirmed renewal + lease), as
  /// steady_clock::time_point::time_since_epoch().count(), after every renewal, so the lock can
  /// tell by the clock alone when its lease may have run out. Same lifetime as lost_flag.
  std::atomic<std::chrono::steady_clock::rep>* valid_until = nullptr;
  /// Called on the watchdog thread when the lease is found lost. Must not block, and must not
  /// call into the lock it reports (release/unlock/extend): the watchdog waits for nobody, but
  /// that lock's release waits for its running callback.
  std::function<void(const std::string& name)> on_lost;
};

namespace detail {

/// Appends one owner-checked renewal: `SET key token IFEQ token PX lease` when `as_set_ifeq`
/// (the caller checked that the script is equivalent and the server has SET IFEQ), else the
/// script. keys: {key}; args: {token, lease_ms} for SET IFEQ.
inline void append_renewal(connection& c, const script& s, bool as_set_ifeq, const std::string_view* keys,
                           std::size_t nkeys, const std::string_view* args, std::size_t nargs) {
  if (as_set_ifeq) {
    const command_form renewal = set_ifeq(keys[0], args[0], args[0], args[1]);
    c.append(renewal.data(), renewal.size());
  } else {
    s.append(c, keys, nkeys, args, nargs);
  }
}

/// An error reply for a deny-oom command over maxmemory (noeviction). SET is one; the extend
/// scripts (GET, PEXPIRE, no shebang flags) are not, so a SET IFEQ renewal refused so is sent
/// again as its script where the connection runs scripts.
inline bool is_oom(const redisReply& r) noexcept {
  return r.type == REDIS_REPLY_ERROR && std::string_view(r.str, r.len).substr(0, 3) == "OOM";
}

/// A renewal's answer, script or SET IFEQ: 1 renewed (1, OK), 0 not ours (0; nil: SET IFEQ
/// found another value or no key, and wrote nothing), -1 anything else (an error reply).
inline int renewal_answer(const redisReply& r) noexcept {
  if (r.type == REDIS_REPLY_INTEGER && (r.integer == 0 || r.integer == 1)) return static_cast<int>(r.integer);
  if (r.type == REDIS_REPLY_NIL) return 0;
  if (r.type == REDIS_REPLY_STATUS && std::string_view(r.str, r.len) == "OK") return 1;
  return -1;
}

}  // namespace detail

class watchdog {
 public:
  using steady = std::chrono::steady_clock;
  /// Calls f with a connection to the server that owns `key` (a Client's run()).
  using runner = std::function<void(std::string_view key, const std::function<void(connection&)>& f)>;
  /// Names the server that owns `key`; renewals of one server share a pipeline. Empty: one server.
  using locator = std::function<std::string(std::string_view key)>;

  /// Most EVALSHAs in one pipeline: bounds the memory of a batch and the time one takes.
  static constexpr std::size_t max_batch = 1000;

 private:
  struct entry;

 public:
  /// A lease's renewals held back by registration::hold_back(). Independent of the
  /// registration (a release may reset it meanwhile: then resuming does nothing).
  class pause {
   public:
    pause() = default;
    pause(pause&& o) noexcept : owner_(std::exchange(o.owner_, nullptr)), entry_(std::move(o.entry_)) {}
    pause& operator=(pause&&) = delete;
    pause(const pause&) = delete;
    pause& operator=(const pause&) = delete;
    /// Resumes as after an extend without an answer.
    ~pause() {
      if (owner_ != nullptr)
        owner_->resume(entry_, steady::time_point::max(), std::chrono::milliseconds(0), -1, ticket_);
    }
    /// The extend sent at `sent` with `lease` renewed the lease (answer 1), found it gone (0),
    /// or got no answer (-1: it may still run). From now on the renewals send `lease` (when the
    /// request said where it goes): a longer extend is not undone by the next renewal, and a
    /// shorter one is renewed often enough. Confirmed, it restarts the lease count from
    /// `sent`; unanswered, it can only shorten it, to sent + lease.
    void resume(steady::time_point sent, std::chrono::milliseconds lease, int answer) noexcept {
      if (owner_ != nullptr) std::exchange(owner_, nullptr)->resume(entry_, sent, lease, answer, ticket_);
    }
    /// Before the extend is sent at `sent` with `lease`: the server may run it at once, so the
    /// lease counts no further than sent + lease until its answer (detail/lease_clock.hpp).
    void sending(steady::time_point sent, std::chrono::milliseconds lease) noexcept {
      if (owner_ != nullptr) ticket_ = owner_->sending(entry_, sent, lease);
    }
    explicit operator bool() const noexcept { return owner_ != nullptr; }

   private:
    friend class watchdog;
    pause(watchdog* owner, std::shared_ptr<entry> e) : owner_(owner), entry_(std::move(e)) {}
    watchdog* owner_ = nullptr;
    std::shared_ptr<entry> entry_;
    detail::lease_clock::ticket ticket_ = 0;  // the extend in flight, once sending() recorded it
  };

  /// Keeps one lock renewed until reset() or destruction. Move-only; empty when default-built.
  class registration {
   public:
    registration() = default;
    registration(registration&& o) noexcept : owner_(std::exchange(o.owner_, nullptr)), entry_(std::move(o.entry_)) {}
    registration& operator=(registration&& o) noexcept {
      if (this != &o) {
        reset();
        owner_ = std::exchange(o.owner_, nullptr);
        entry_ = std::move(o.entry_);
      }
      return *this;
    }
    registration(const registration&) = delete;
    registration& operator=(const registration&) = delete;
    ~registration() { reset(); }

    /// Stops the renewals. Nothing of this registration happens after reset() returns: its
    /// flags are not touched and its on_lost does not run (when it is running, reset() waits
    /// for it; on the watchdog thread itself, i.e. from inside a callback, it does not wait).
    /// A renewal already on its way may still reach the server, where the owner check makes it
    /// a no-op once the lock is released; reset() does not wait for its reply, so a release is
    /// never held up by a server that does not answer.
    void reset() noexcept {
      if (owner_ != nullptr) owner_->remove(entry_);
      owner_ = nullptr;
      entry_.reset();
    }
    explicit operator bool() const noexcept { return owner_ != nullptr; }

    /// A watch (a request without extend script): the hold's lease now lasts until `until`, as
    /// the hold's own lease_clock counts it, earlier or later than before; its on_lost runs
    /// once that has passed.
    void lasts_until(steady::time_point until) noexcept {
      if (owner_ != nullptr) owner_->watch(entry_, until);
    }

    /// For an extend() the lock sends itself: holds this lease's renewals back (a renewal in
    /// flight is answered first) until the returned pause is resumed or destroyed, so the
    /// extend never races a renewal of the same hold. Empty (nothing held back) when not
    /// registered, already cancelled or lost, or called on the watchdog thread (an on_lost)
    /// while another thread holds it back.
    pause hold_back() noexcept { return share().hold_back(); }

    /// This registration as seen by one hold_back() that may wait (for the batch in flight,
    /// whose on_lost callbacks may release locks): take it under the lock that guards the
    /// registration, then let go of that lock before calling hold_back(). A reset() meanwhile
    /// makes hold_back() hold nothing back.
    class ref {
     public:
      pause hold_back() const noexcept;

     private:
      friend class registration;
      watchdog* owner_ = nullptr;
      std::shared_ptr<entry> entry_;
    };
    ref share() const {
      ref r;
      r.owner_ = owner_;
      r.entry_ = entry_;
      return r;
    }

   private:
    friend class watchdog;
    registration(watchdog* owner, std::shared_ptr<entry> e) : owner_(owner), entry_(std::move(e)) {}
    watchdog* owner_ = nullptr;
    std::shared_ptr<entry> entry_;
  };

  explicit watchdog(runner run, locator server_of = nullptr) : run_(std::move(run)), server_of_(std::move(server_of)) {
    if (!run_) throw invalid_argument("watchdog: runner must not be empty");
  }
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;

  /// Stops the thread and joins it (waits for a batch in flight, bounded by the client's
  /// timeouts). Locks still registered are no longer renewed.
  ~watchdog() {
    {
      std::lock_guard<std::mutex> g(m_);
      stop_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  /// Starts renewing (and the thread, on the first call). Throws invalid_argument for a
  /// request without script or lease.
  registration add(renewal_request r) {
    if (r.extend == nullptr && !r.on_lost)
      throw invalid_argument("watchdog: renewal_request without extend script (renewals) or on_lost (a watch)");
    if (r.lease.count() <= 0) throw invalid_argument("watchdog: renewal lease must be positive");
    if (r.confirmed == steady::time_point{}) r.confirmed = steady::now();
    auto e = std::make_shared<entry>(std::move(r));
    bool first;
    {
      std::lock_guard<std::mutex> g(m_);
      if (stop_) throw lock_error("watchdog: stopped");
      if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
      push(e);
      ++registered_;
      first = heap_.front() == e;
    }
    if (first) wake_.notify_all();  // the thread may sleep until a later due time
    return registration(this, std::move(e));
  }

  watchdog_stats stats() const {
    std::lock_guard<std::mutex> g(m_);
    return snapshot();
  }

  /// Waits until pred(stats) holds (checked after every batch) or the timeout passes.
  template <class Rep, class Period, class Pred>
  bool wait_for_stats(const std::chrono::duration<Rep, Period>& timeout, Pred pred) const {
    std::unique_lock<std::mutex> g(m_);
    return done_.wait_for(g, timeout, [&] { return pred(snapshot()); });
  }

  /// True once the thread was started (by the first registration).
  bool running() const {
    std::lock_guard<std::mutex> g(m_);
    return thread_.joinable();
  }

 private:
  enum class outcome { pending, renewed, not_ours, failed, expired, watched };

  struct entry {
    explicit entry(renewal_request r) : req(std::move(r)), lease(req.lease), args_text(req.args) {
      for (const auto& k : req.keys) keys.emplace_back(k);
      view_args();
      clock.confirmed(req.confirmed, lease);
      watched_until = clock.until();  // before schedule(): a watch is due at its end
      schedule();
    }
    // A renewal (or an extend) that sent `l` at `at` was confirmed: the next one is scheduled.
    void renewed(steady::time_point at, std::chrono::milliseconds l, detail::lease_clock::ticket t = 0) {
      clock.confirmed(at, l, t);
      schedule();
      failing = false;
    }
    void schedule() {
      if (renews()) {
        eligible = clock.renewal_eligible();
        due = clock.renewal_due();
      } else {
        eligible = due = watched_until;  // a watch only: due when the lease ends
      }
    }
    // False for a watch (renewal_request without extend script): no renewals, only on_lost
    // once the end the hold last gave (registration::lasts_until) has passed.
    bool renews() const noexcept { return req.extend != nullptr; }
    steady::time_point end() const noexcept { return renews() ? clock.until() : watched_until; }
    // The renewals send `l` from now on (changed only while neither in flight nor queued).
    void set_lease(std::chrono::milliseconds l) {
      if (req.lease_arg >= args_text.size() || l.count() <= 0) return;
      lease = l;
      args_text[req.lease_arg] = std::to_string(l.count());
      view_args();
    }
    void view_args() { args.assign(args_text.begin(), args_text.end()); }
    const renewal_request req;
    std::vector<std::string_view> keys, args;  // views of req.keys and args_text, for script::append
    // Guarded by watchdog::m_; lease and args_text are also read by the batch the entry is in.
    std::chrono::milliseconds lease;     // what the renewals send
    std::vector<std::string> args_text;  // req.args with that lease
    detail::lease_clock clock;           // how long the lease certainly lasts (detail/lease_clock.hpp)
    steady::time_point watched_until;    // a watch's end, as its hold counts it
    steady::time_point eligible, due;
    bool failing = false, cancelled = false, in_flight = false, in_callback = false, in_heap = false, lost = false;
    bool paused = false;  // held back for an extend (registration::hold_back)
  };
  using entry_ptr = std::shared_ptr<entry>;

  // Why a renewal can never act on a released (or released and re-acquired) lock:
  //  1. registration::reset() runs before the lock's release script is sent. It marks the
  //     entry cancelled under m_ (and waits for its on_lost if that is running). The thread
  //     takes entries and applies results under m_ and skips cancelled ones, so after reset()
  //     returns the entry is never taken again and never touches the lock (flags, callback).
  //     The entry itself (request, keys) is shared with the batch in flight, so the send can
  //     finish on it after the lock is gone; the script it points to is a static one.
  //  2. A renewal that is still on its way when the release is sent cannot renew someone
  //     else's lease: the script (or SET IFEQ, which never creates a key) is owner-checked and
  //     every outermost acquisition draws a fresh owner (token or owner name), so after the
  //     release or a re-acquisition it answers 0. That 0 lands on the cancelled entry and is
  //     ignored; the new acquisition has a new entry. (A shared read hold released and taken
  //     again while the same thread still writes keeps the owner name; its renewals also name
  //     the read hold, so they answer 0 too: detail/shared_scripts.hpp.)
  void remove(const entry_ptr& e) noexcept {
    std::unique_lock<std::mutex> g(m_);
    if (e->cancelled) return;
    e->cancelled = true;
    --registered_;
    if (e->in_heap) {
      ++dead_in_heap_;
      if (dead_in_heap_ > 64 && dead_in_heap_ * 2 > heap_.size()) compact();
    }
    if (std::this_thread::get_id() != thread_.get_id()) done_.wait(g, [&] { return !e->in_callback; });
  }

  // registration::hold_back(): waits until `e` is in no batch and no other pause, then marks
  // it paused (the loop drops it from the heap when it comes up; resume() puts it back).
  pause hold(const entry_ptr& e) noexcept {
    std::unique_lock<std::mutex> g(m_);
    if (std::this_thread::get_id() == thread_.get_id()) {
      // An on_lost callback: its batch's replies are all in and applied (its entries stay in
      // flight only until the callbacks end, and go back to the heap unless paused), so nothing
      // of this hold is on its way. It cannot wait for another thread's pause: then nothing.
      if (e->cancelled || e->lost || e->paused) return {};
      e->paused = true;
      return pause(this, e);
    }
    done_.wait(g, [&] { return e->cancelled || e->lost || (!e->in_flight && !e->paused); });
    if (e->cancelled || e->lost) return {};
    e->paused = true;
    return pause(this, e);
  }

  void resume(const entry_ptr& e, steady::time_point sent, std::chrono::milliseconds lease, int answer,
              detail::lease_clock::ticket ticket) noexcept {
    bool first = false;
    {
      std::lock_guard<std::mutex> g(m_);
      e->paused = false;
      if (e->cancelled || e->lost || lease.count() <= 0) e->clock.refused(ticket);  // nothing more to count
      if (!e->cancelled && !e->lost && lease.count() > 0) {
        e->set_lease(lease);
        const steady::time_point now = steady::now();
        if (answer == 1 && now >= e->end()) {
          // Confirmed only after the lease could have run out (as in apply()): lost() may have
          // said so already, and a lost lease stays lost. Reported at once, as expired.
          e->due = e->eligible = now;
        } else if (answer == 1) {
          e->renewed(sent, lease, ticket);  // the lease now runs from the extend's send, and renewals keep it
        } else {
          if (answer < 0) {
            e->clock.unanswered(sent, lease, ticket);  // it may still run, and shorten the lease
            e->failing = true;
          } else {
            e->clock.refused(ticket);  // not ours: the next renewal finds that and reports it
          }
          // Not ours (the next renewal finds that and reports it), or unknown: renewed again at once.
          e->due = e->eligible =
              std::min(e->end(), now + (answer == 0 ? steady::duration(0) : e->clock.retry_interval()));
        }
        if (answer != 0 && e->req.valid_until != nullptr) {
          // seq_cst with lease_keeper::lost(), as in apply(): a reader who saw the old end pass
          // has set the lost flag; then the loss is reported at once (take_expired).
          e->req.valid_until->store(e->end().time_since_epoch().count());
          if (e->req.lost_flag != nullptr && e->req.lost_flag->load()) {
            e->clock.end_by(now);
            e->due = e->eligible = now;
          }
        }
      }
      if (!e->cancelled && !e->lost && !e->in_flight) {
        if (e->in_heap) std::make_heap(heap_.begin(), heap_.end(), later);  // its due time may have moved
        else push(e);
        first = heap_.front() == e;
      }
    }
    done_.notify_all();  // another pause of the same entry may go on
    if (first) wake_.notify_all();
  }

  detail::lease_clock::ticket sending(const entry_ptr& e, steady::time_point sent,
                                      std::chrono::milliseconds lease) noexcept {
    std::lock_guard<std::mutex> g(m_);
    if (e->cancelled || e->lost || lease.count() <= 0) return 0;
    detail::lease_clock::ticket t = 0;
    try {
      t = e->clock.sending(sent, lease);
    } catch (...) {  // out of memory: count the extend as if it ran at once
      e->clock.end_by(sent + lease);
    }
    // The entry is paused (out of the heap): its due time is set again when it resumes.
    if (e->req.valid_until != nullptr) e->req.valid_until->store(e->end().time_since_epoch().count());
    return t;
  }

  void watch(const entry_ptr& e, steady::time_point until) noexcept {
    bool first = false;
    {
      std::lock_guard<std::mutex> g(m_);
      if (e->cancelled || e->lost || e->renews()) return;
      e->watched_until = until;
      e->schedule();
      if (e->in_heap) {
        std::make_heap(heap_.begin(), heap_.end(), later);
        first = heap_.front() == e;
      }
    }
    if (first) wake_.notify_all();
  }

  static bool later(const entry_ptr& a, const entry_ptr& b) { return a->due > b->due; }

  void push(const entry_ptr& e) {
    e->in_heap = true;
    heap_.push_back(e);
    std::push_heap(heap_.begin(), heap_.end(), later);
  }
  entry_ptr pop() {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    entry_ptr e = std::move(heap_.back());
    heap_.pop_back();
    e->in_heap = false;
    if (e->cancelled) --dead_in_heap_;
    return e;
  }
  // Cancelled entries stay in the heap until popped; this drops them when they pile up.
  void compact() {
    auto dead = std::remove_if(heap_.begin(), heap_.end(), [](const entry_ptr& e) {
      if (e->cancelled) e->in_heap = false;
      return e->cancelled;
    });
    heap_.erase(dead, heap_.end());
    std::make_heap(heap_.begin(), heap_.end(), later);
    dead_in_heap_ = 0;
  }

  watchdog_stats snapshot() const {
    watchdog_stats s = stats_;
    s.registered = registered_;
    return s;
  }

  void loop() {
    std::unique_lock<std::mutex> g(m_);
    bool in_tick = false;
    steady::time_point tick_start;
    while (!stop_) {
      while (!heap_.empty() && (heap_.front()->cancelled || heap_.front()->paused)) pop();
      const steady::time_point now = steady::now();
      if (heap_.empty() || heap_.front()->eligible > now) {
        if (in_tick) {  // nothing more is due: the tick is over
          in_tick = false;
          stats_.last_tick = std::chrono::duration_cast<std::chrono::microseconds>(now - tick_start);
          stats_.max_tick = std::max(stats_.max_tick, stats_.last_tick);
          done_.notify_all();
        }
        if (heap_.empty()) {
          wake_.wait(g);
        } else {
          // A copy: while we wait, remove() may compact the heap and free this entry.
          const steady::time_point due = heap_.front()->due;
          wake_.wait_until(g, due);
        }
        continue;
      }
      if (!in_tick) {
        in_tick = true;
        tick_start = now;
        ++stats_.ticks;
      }
      std::vector<entry_ptr> batch;
      std::vector<outcome> results;
      take_expired(now, batch, results);
      const std::size_t expired = batch.size();
      while (batch.size() - expired < max_batch && !heap_.empty()) {
        if (heap_.front()->cancelled || heap_.front()->paused) {
          pop();
          continue;
        }
        if (heap_.front()->eligible > now) break;
        entry_ptr e = pop();
        e->in_flight = true;
        results.push_back(outcome::pending);
        batch.push_back(std::move(e));
      }
      stats_.in_flight = batch.size();
      std::vector<steady::time_point> ends(batch.size());
      for (std::size_t i = 0; i < batch.size(); ++i) ends[i] = batch[i]->end();
      g.unlock();
      std::vector<steady::time_point> sent(batch.size()), answered(batch.size());
      const steady::time_point send_start = steady::now();
      const std::uint64_t pipelines = send(batch, ends, results, sent, answered);
      report_renewals(batch.size() - expired, results, send_start);
      g.lock();
      stats_.in_flight = 0;
      stats_.batches += pipelines;
      std::vector<entry_ptr> report = apply(batch, results, sent, answered);
      for (const entry_ptr& e : report) {
        if (e->cancelled) continue;  // released meanwhile (e.g. by an earlier callback)
        e->in_callback = true;
        g.unlock();
        try {
          e->req.on_lost(e->req.name);
        } catch (...) {
          // a callback's exception has nowhere to go on this thread
        }
        g.lock();
        e->in_callback = false;
      }
      for (const entry_ptr& e : batch) {
        e->in_flight = false;
        if (!e->cancelled && !e->lost && !e->paused) push(e);
      }
      done_.notify_all();
    }
  }

  // Under m_: moves every lease that ran out unconfirmed (wherever it sits in the heap: the
  // heap is ordered by due time, not by end) into `batch` as expired, to be reported without
  // I/O. One pass over the heap per batch.
  void take_expired(steady::time_point now, std::vector<entry_ptr>& batch, std::vector<outcome>& results) {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < heap_.size(); ++i) {
      entry_ptr& e = heap_[i];
      const steady::time_point end = e->end();
      if (!e->cancelled && !e->paused && end <= now) {
        e->in_heap = false;
        e->in_flight = true;
        batch.push_back(std::move(e));
        results.push_back(outcome::expired);
        continue;
      }
      if (kept != i) heap_[kept] = std::move(e);
      ++kept;
    }
    if (kept != heap_.size()) {
      heap_.resize(kept);
      std::make_heap(heap_.begin(), heap_.end(), later);
    }
  }

  // While alive, the connection's reads give up at `deadline` (but not sooner than `floor`)
  // when that comes before its command timeout. A read that gives up breaks the connection
  // (the pool discards it); after one that succeeds the command timeout is restored, and a
  // connection whose timeout cannot be restored is closed rather than lent out shortened.
  class read_deadline {
   public:
    read_deadline(connection& c, steady::time_point deadline, steady::duration floor) : c_(c) {  // c is connected
      const std::chrono::milliseconds timeout = c.options().command_timeout;
      const steady::time_point now = steady::now();
      if (timeout.count() > 0 && deadline >= now + timeout) return;
      shortened_ = true;
      const auto left = std::chrono::duration_cast<std::chrono::microseconds>(std::max(deadline - now, floor));
      if (!set(std::max(left, std::chrono::microseconds(1000)))) c_.close();  // ensure_ready() reconnects
    }
    ~read_deadline() {
      if (shortened_ && !c_.broken() && !set(c_.options().command_timeout)) c_.close();
    }
    read_deadline(const read_deadline&) = delete;
    read_deadline& operator=(const read_deadline&) = delete;
    bool shortened() const noexcept { return shortened_; }

   private:
    bool set(std::chrono::microseconds t) noexcept {
      timeval tv{};
      tv.tv_sec = static_cast<decltype(tv.tv_sec)>(t.count() / 1000000);
      tv.tv_usec = static_cast<decltype(tv.tv_usec)>(t.count() % 1000000);
      return redisSetTimeout(c_.native_handle(), tv) == REDIS_OK;
    }
    connection& c_;
    bool shortened_ = false;
  };

  // Sends the pending renewals of `batch`, one pipeline per server; fills results, sent and
  // answered (when the group's replies were read). `ends`: each lease's end as of the batch.
  // A group's replies are not waited for past the earliest end among its leases (that lease
  // must be reported then), nor cut shorter than the group's retry interval.
  // Runs without m_, on the watchdog thread only. Returns the number of pipelines sent.
  std::uint64_t send(const std::vector<entry_ptr>& batch, const std::vector<steady::time_point>& ends,
                     std::vector<outcome>& results, std::vector<steady::time_point>& sent,
                     std::vector<steady::time_point>& answered) {
    std::map<std::string, std::vector<std::size_t>> by_server;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (results[i] != outcome::pending) continue;
      if (!batch[i]->renews()) {  // a watch is only ever taken once its end has passed
        results[i] = batch[i]->end() <= steady::now() ? outcome::expired : outcome::watched;
        continue;
      }
      try {  // nothing may escape the watchdog thread: a throwing locator fails this renewal
        by_server[server_of_ ? server_of_(batch[i]->req.route_key) : std::string()].push_back(i);
      } catch (...) {
        results[i] = outcome::failed;
      }
    }
    std::uint64_t pipelines = 0;
    for (const auto& server_batch : by_server) {  // no structured binding: a lambda captures group (C++17)
      const std::string& server = server_batch.first;
      const std::vector<std::size_t>& group = server_batch.second;
      steady::time_point reply_deadline = steady::time_point::max();
      steady::duration retry = steady::duration::max();
      for (std::size_t i : group) {
        reply_deadline = std::min(reply_deadline, ends[i]);
        retry = std::min(retry, batch[i]->clock.retry_interval());
      }
      auto failed = failed_at_.find(server);
      if (failed != failed_at_.end() && steady::now() < failed->second + retry)
        continue;  // this server failed a pipeline a moment ago: these fail now, retried later
      bool cut_short = false;
      try {
        run_(batch[group.front()]->req.route_key, [&](connection& c) {
          const steady::time_point at = steady::now();  // before the write: conservative
          for (std::size_t i : group) sent[i] = at;
          c.ensure_ready();  // (re)connects: the deadline is set on the socket in use
          read_deadline bounded(c, reply_deadline, retry);
          cut_short = bounded.shortened();
          const bool set_ifeq = c.features().set_ifeq;  // one round trip per connect, within the deadline
          const bool scripting = c.features().scripting;
          std::vector<std::size_t> noscript, oom;
          pipeline(c, batch, group, results, set_ifeq, scripting, noscript, oom);
          ++pipelines;
          // Again, within the same deadline and counted from the same send time: the scripts
          // refused with NOSCRIPT (loaded first; refused again after a load: failed), and the
          // SET IFEQs refused over maxmemory, as their scripts.
          std::vector<const script*> loaded;  // in an earlier round
          for (int round = 0; round < 2 && !(noscript.empty() && oom.empty()); ++round) {
            std::vector<std::size_t> which = std::move(oom);
            oom.clear();
            std::vector<const script*> loading;  // this round: each script once
            for (std::size_t i : noscript) {
              const script* s = batch[i]->req.extend;
              if (std::find(loaded.begin(), loaded.end(), s) != loaded.end()) {
                results[i] = outcome::failed;
                continue;
              }
              if (std::find(loading.begin(), loading.end(), s) == loading.end()) {
                s->load(c);
                loading.push_back(s);
              }
              which.push_back(i);
            }
            loaded.insert(loaded.end(), loading.begin(), loading.end());
            noscript.clear();
            if (which.empty()) break;
            pipeline(c, batch, which, results, false, false, noscript, oom);
            ++pipelines;
          }
          for (std::size_t i : noscript) results[i] = outcome::failed;
        });
        failed_at_.erase(server);
      } catch (...) {
        // Connection lost, timed out or pool exhausted: every renewal without an answer failed.
        // Unless it was our own shortened deadline that gave up, the server gets no more
        // pipelines until a retry is due (each renewal due for it fails at once meanwhile).
        if (!cut_short) failed_at_[server] = steady::now();
      }
      const steady::time_point now = steady::now();
      for (std::size_t i : group) {
        answered[i] = now;
        if (results[i] == outcome::pending) results[i] = outcome::failed;
      }
    }
    return pipelines;
  }

  // One round trip: appends the renewals of `which` (EVALSHA, or SET IFEQ where the server
  // has it), reads their replies. Adds to `noscript` the ones refused with NOSCRIPT and, when
  // `oom_as_script`, to `oom` the SET IFEQs refused over maxmemory (both left pending).
  static void pipeline(connection& c, const std::vector<entry_ptr>& batch, const std::vector<std::size_t>& which,
                       std::vector<outcome>& results, bool set_ifeq, bool oom_as_script,
                       std::vector<std::size_t>& noscript, std::vector<std::size_t>& oom) {
    for (std::size_t i : which) {
      const entry& e = *batch[i];
      detail::append_renewal(c, *e.req.extend, e.req.as_set_ifeq && set_ifeq, e.keys.data(), e.keys.size(),
                             e.args.data(), e.args.size());
    }
    for (std::size_t i : which) {
      reply_ptr r = c.read_reply();
      const int renewed = detail::renewal_answer(*r);
      if (script::is_noscript(*r)) noscript.push_back(i);
      else if (oom_as_script && set_ifeq && batch[i]->req.as_set_ifeq && detail::is_oom(*r)) oom.push_back(i);
      else if (renewed == 1) results[i] = outcome::renewed;
      else if (renewed == 0) results[i] = outcome::not_ours;
      else results[i] = outcome::failed;
    }
  }

  // Tells the observer (observe.hpp) of the renewals just sent (none: nothing to tell).
  static void report_renewals(std::size_t sent, const std::vector<outcome>& results, steady::time_point start) {
    if (sent == 0) return;
    detail::notify([&](lock_observer& o) {
      renewed_event e;
      e.batch = sent;
      e.renewed = static_cast<std::size_t>(std::count(results.begin(), results.end(), outcome::renewed));
      e.latency = steady::now() - start;
      o.on_renewed(e);
    });
  }

  // Under m_: records the results; returns the entries whose on_lost must be called.
  std::vector<entry_ptr> apply(const std::vector<entry_ptr>& batch, const std::vector<outcome>& results,
                               const std::vector<steady::time_point>& sent,
                               const std::vector<steady::time_point>& answered) {
    std::vector<entry_ptr> report;
    const steady::time_point now = steady::now();
    for (std::size_t i = 0; i < batch.size(); ++i) {
      entry& e = *batch[i];
      if (e.cancelled) continue;  // released while in flight: the answer concerns nobody
      const steady::time_point end = e.end();
      bool lost = false;
      switch (results[i]) {
        case outcome::renewed:
          ++stats_.renewals;
          // Confirmed only after the lease could have run out: the lock's lost() may already
          // have said so (by the clock), and a lost lease stays lost.
          if (answered[i] >= end) {
            lost = true;
            break;
          }
          if (sent[i] > e.due)
            stats_.max_late =
                std::max(stats_.max_late, std::chrono::duration_cast<std::chrono::microseconds>(sent[i] - e.due));
          e.renewed(sent[i], e.lease);
          if (e.req.valid_until != nullptr) {
            // seq_cst with lease_keeper::lost(): a reader who saw the old end pass has set the
            // lost flag, and then we see it here and report the loss (lost() stays true).
            e.req.valid_until->store(e.end().time_since_epoch().count());
            lost = e.req.lost_flag != nullptr && e.req.lost_flag->load();
          }
          break;
        case outcome::failed:
        case outcome::pending:
          ++stats_.failures;
          e.failing = true;
          if (sent[i] != steady::time_point{}) e.clock.unanswered(sent[i], e.lease);  // it may have been sent
          e.due = e.eligible = std::min(e.end(), now + e.clock.retry_interval());
          lost = now >= end;
          break;
        case outcome::not_ours:
        case outcome::expired: lost = true; break;
        case outcome::watched: e.schedule(); break;  // a watch whose end has not come
      }
      if (!lost) continue;
      e.lost = true;
      ++stats_.lost;
      if (e.req.lost_flag != nullptr) e.req.lost_flag->store(true, std::memory_order_release);
      if (e.req.on_lost) report.push_back(batch[i]);
    }
    return report;
  }

  runner run_;
  locator server_of_;
  mutable std::mutex m_;
  std::condition_variable wake_;          // the thread sleeps on it until the next due time
  mutable std::condition_variable done_;  // a batch was handled (releases and stats waiters)
  std::vector<entry_ptr> heap_;           // min-heap on due
  std::size_t dead_in_heap_ = 0;          // cancelled entries still in heap_
  std::size_t registered_ = 0;
  watchdog_stats stats_;
  bool stop_ = false;
  std::map<std::string, steady::time_point> failed_at_;  // watchdog thread only: last failed pipeline per server
  std::thread thread_;
};

inline watchdog::pause watchdog::registration::ref::hold_back() const noexcept {
  if (owner_ == nullptr) return {};
  return owner_->hold(entry_);
}

namespace detail {

/// True when Client offers the optional `watchdog()` of the Client concept (see client.hpp).
template <class Client, class = void>
struct has_watchdog : std::false_type {};
template <class Client>
struct has_watchdog<Client, std::void_t<decltype(std::declval<Client&>().watchdog())>>
    : std::is_same<decltype(std::declval<Client&>().watchdog()), watchdog&> {};

}  // namespace detail
}  // namespace redislock
