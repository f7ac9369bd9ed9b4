#pragma once
/// @file detail/wake_wait.hpp
/// @brief Waiting for a lock by pub/sub notification, falling back to backoff.
///
/// The loop: attempt; if it failed, subscribe to the channel the release publishes on (and
/// wait for the server's confirmation), attempt again, then sleep until a notification, the
/// holder's remaining lease (an expiring lease publishes nothing), or the deadline; repeat.
/// So a waiter sends a handful of commands however long the lock is held.
///
/// The subscription follows the node that runs the lock's scripts: a release counts the
/// listeners on ITS node and passes over a waiter with none there (detail/notify_lua.hpp), so a
/// waiter subscribed elsewhere would be passed over at every release and starve under steady
/// contention. A Client whose routing can change (cluster: the slot map; Sentinel: the master)
/// offers routing_epoch(); after every attempt the waiter compares it, and when it changed asks
/// the client for the channel's subscriber again. A subscription on another subscriber than
/// that one (a demoted master accepts SSUBSCRIBE for its new master's slots and SUBSCRIBE for
/// anything, and ends neither) is dropped and made on the right one, then the waiter attempts
/// again before sleeping (no lost wake-up). A subscription kept from an earlier wait is checked
/// the same way before the first attempt. On a cluster a sharded subscription also ends when
/// the channel's slot moves (detail/subscriber.hpp): the waiter joins again through the client,
/// which routes it to the new owner. Both count as re-joins, at most kMaxRejoins in a row; any
/// other failure (a lost connection, a refusal), or more re-joins than that, leads to backoff,
/// and kResubscribe later to a new subscription, however often it failed. While it is not
/// subscribed on the right node a release may find it "not alive" (its notice reached nobody)
/// and drop it from the lock's queue: its next "wait" attempt queues it again, behind those who
/// came meanwhile; it loses its place, never the lock.

#include <redislock/detail/observe_hooks.hpp>
#include <redislock/detail/subscriber.hpp>
#include <redislock/detail/wait.hpp>
#include <redislock/errors.hpp>
#include <redislock/lock_options.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace redislock::detail {

/// True when Client offers `detail::subscriber& subscriber(std::string_view channel)`: a
/// subscriber per channel (a cluster client's, on the node that owns the channel's slot).
template <class Client, class = void>
struct has_channel_subscriber : std::false_type {};
template <class Client>
struct has_channel_subscriber<
    Client, std::void_t<decltype(std::declval<Client&>().subscriber(std::declval<std::string_view>()))>>
    : std::true_type {};

/// True when Client offers `detail::subscriber& subscriber()` or the per-channel form (see client.hpp).
template <class Client, class = void>
struct has_subscriber : has_channel_subscriber<Client> {};
template <class Client>
struct has_subscriber<Client, std::void_t<decltype(std::declval<Client&>().subscriber())>> : std::true_type {};

/// The subscriber that wakes waiters on `channel`.
template <class Client>
subscriber& subscriber_for(Client& client, const std::string& channel) {
  if constexpr (has_channel_subscriber<Client>::value) {
    return client.subscriber(std::string_view(channel));
  } else {
    return client.subscriber();
  }
}

/// True when Client offers `std::uint64_t routing_epoch()`: it changes whenever the subscriber
/// that subscriber_for() gives may have changed.
template <class Client, class = void>
struct has_routing_epoch : std::false_type {};
template <class Client>
struct has_routing_epoch<Client, std::void_t<decltype(std::uint64_t{std::declval<Client&>().routing_epoch()})>>
    : std::true_type {};

template <class Client>
std::uint64_t routing_epoch_of(Client& client) {
  if constexpr (has_routing_epoch<Client>::value) {
    return client.routing_epoch();
  } else {
    return 0;
  }
}

/// subscriber_for(), or nullptr when the client cannot route the channel now (no master known):
/// for a check that must not end the wait.
template <class Client>
subscriber* rerouted_subscriber(Client& client, const std::string& channel) {
  try {
    return &subscriber_for(client, channel);
  } catch (const error&) {
    return nullptr;
  }
}

/// Re-joins in a row after the server ended a subscription (its slot moved) or routing moved
/// the channel to another subscriber, before backing off.
inline constexpr int kMaxRejoins = 4;
/// After a failed subscription (a lost connection, a refusal, more re-joins than kMaxRejoins)
/// a waiter backs off this long, then subscribes again: every time, however often it failed, so
/// it listens again within this bound of the cause going away (under steady contention a
/// waiter nobody can wake is passed over at every release, and gets the lock only by
/// listening). It costs less than the backoff attempts made meanwhile (one per retry_max at
/// most); a refused SUBSCRIBE or a failed connect also makes the client's subscriber refuse
/// joins for its retry_after (1 s) without asking the server (detail/subscriber.hpp), so a
/// refusal costs the server one SUBSCRIBE a second per client. The async waiter uses it too.
inline constexpr std::chrono::milliseconds kResubscribe{250};

struct wait_plan {
  std::chrono::milliseconds retry_min, retry_max;  // backoff bounds (fallback)
  std::chrono::milliseconds max_sleep;             // attempt at least this often (fair: refresh)
  bool caller_tries_last = false;                  // the caller makes its own last attempt once the deadline passed
};

/// The deadline has passed, or the call was cancelled (detail/cancellation.hpp): either way the
/// wait ends as at its deadline.
inline bool passed(const deadline& d) { return (d && steady::now() >= *d) || cancel_requested(); }

/// What an attempt returns when it failed without learning anything to wait on (the mutex's
/// plain SET): the next attempt follows at once.
inline constexpr std::chrono::milliseconds unknown_pttl{-3};

/// Whether a hand-off notice must be confirmed by an attempt before it is taken as the lock.
/// The grant it reports came after the waiter's first "wait" of this acquisition was sent (its
/// owner enters the queue only through those), so the granted lease runs at least until
/// first_wait + lease. A notice read when less than a third of that is left may be stale: the
/// grant may have run out and the lock moved on while the waiter was away (paused, or its
/// subscriber connection slower than the command one). Then the waiter attempts again, which
/// finds the lock its own (with a fresh lease) or refuses. Without a first "wait": always.
inline bool hand_off_needs_confirming(const std::optional<steady::time_point>& first_wait,
                                      std::chrono::milliseconds lease) {
  return !first_wait || *first_wait + lease - lease / 3 <= steady::now();
}

/// How long to sleep on a subscription after a failed attempt.
inline steady::time_point wake_limit(std::chrono::milliseconds holder_pttl, const deadline& d,
                                     std::chrono::milliseconds max_sleep) {
  // +1 ms: the key is gone when its PTTL has run out on the server, not a moment before.
  // A holder without expiry (someone PERSISTed the key) is re-checked every second.
  std::chrono::milliseconds sleep =
      std::min(max_sleep,
               holder_pttl.count() >= 0 ? holder_pttl + std::chrono::milliseconds(1) : std::chrono::milliseconds(1000));
  steady::time_point t = steady::now() + sleep;
  return d ? std::min(t, *d) : t;
}

/// Calls attempt() until it acquires (true) or the deadline passes (false). attempt()
/// returns nullopt when it acquired, otherwise the holder's remaining lease (< 0: unknown).
/// The first attempt is made before subscribing, so an uncontended lock costs one round trip
/// and try_lock() (a deadline of now) never subscribes.
/// handed_over(subscription&) is asked after each notification: true when the message itself
/// means the lock is ours (a hand-off on the waiter's own channel), so no attempt is needed.
/// kept: a subscription owned by the caller, kept across waits (nullptr: one per wait).
template <class Client, class Attempt, class HandedOver>
bool wait_for_release(Client& client, const std::string& channel, const deadline& d, const wait_plan& plan,
                      Attempt&& attempt, HandedOver&& handed_over, subscriber::subscription* kept = nullptr) {
  if constexpr (has_subscriber<Client>::value) {
    std::uint64_t epoch = routing_epoch_of(client);  // read first: a change during the lookup is seen
    subscriber* hub = &subscriber_for(client, channel);
    subscriber::subscription local;
    subscriber::subscription& sub = kept ? *kept : local;
    // Kept from an earlier wait on a node that no longer serves the channel: dropped, so the
    // first attempt does not count on it.
    if (sub.hub() != hub) sub.reset();
    // Already subscribed (kept from an earlier wait, or by a neighbour): join before the first
    // attempt, free of charge.
    if (!sub.check_active()) sub = hub->join_if_subscribed(channel);
    bool joined = false, fell_back = false;
    int rejoins = 0;
    for (;;) {
      probe_attempted();
      std::optional<std::chrono::milliseconds> pttl = attempt();
      if (!pttl) return true;
      if (passed(d)) return false;
      // The attempt may have been redirected, or found the master gone: the channel's
      // subscriber is the one of the node that ran it (a failed look-up keeps the last one).
      if (const std::uint64_t now = routing_epoch_of(client); now != epoch) {
        epoch = now;
        if (subscriber* routed = rerouted_subscriber(client, channel)) hub = routed;
      }
      const bool elsewhere = sub.hub() != nullptr && sub.hub() != hub;
      if (elsewhere || !sub.active()) {
        // Failed while we waited (or at once): back off for a while, unless it has to follow
        // the channel to another node (its slot moved, or routing names another subscriber now).
        bool back_off = (joined || sub.moved() || elsewhere) && (!(elsewhere || sub.moved()) || rejoins >= kMaxRejoins);
        if (!back_off) {
          if (joined || sub.moved() || elsewhere) {
            ++rejoins;
            if (!elsewhere) {
              epoch = routing_epoch_of(client);
              hub = &subscriber_for(client, channel);  // the client has learned of the move by now
            }
          }
          sub = hub->join(channel, d);
          joined = true;
          if (!sub.active()) {
            if (passed(d)) return false;
            back_off = !sub.moved();
          }
        }
        if (!back_off)
          continue;  // subscribed (or moved: join again): attempt again first, so no release goes unnoticed
        // Back off, then subscribe again: a release passes over a waiter nobody listens for (and
        // drops its place), so one that only polled would lose its place at every release.
        if (!std::exchange(fell_back, true)) hub->count_fallback();
        if (retry_until(d, plan.retry_min, plan.retry_max, attempt, steady::now() + kResubscribe)) return true;
        if (passed(d)) return false;
        joined = false;
        rejoins = 0;
        sub.reset();
        epoch = routing_epoch_of(client);
        if (subscriber* routed = rerouted_subscriber(client, channel)) hub = routed;
        continue;
      }
      if (*pttl == unknown_pttl) continue;
      const bool noticed = sub.wait_until(wake_limit(*pttl, d, plan.max_sleep));
      if (cancel_requested()) return false;  // as at the deadline: the caller leaves the queue
      probe_woken(noticed ? wake_cause::notice : wake_cause::timer);
      if (noticed) {
        if (handed_over(sub)) {
          probe_handed_over();
          return true;
        }
      } else if (plan.caller_tries_last && passed(d)) {
        return false;
      }
    }
  } else {
    return retry_until(d, plan.retry_min, plan.retry_max, std::forward<Attempt>(attempt));
  }
}

}  // namespace redislock::detail
