#pragma once
/// @file detail/shared_scripts.hpp
/// @brief Key layout and Lua scripts of redislock::basic_shared_mutex (read/write lock).
///
/// Key layout for a lock named N with key prefix P (default "redislock:"):
///
///   P{N}         hash    @kind        = "shared" (tells this lock from a reentrant lock)
///                        @w           = owner id of the writer (absent: no writer)
///                        @wx          = the writer's lease end, server time in ms
///                        r:<owner>    = that reader's hold count (reads are reentrant)
///                        x:<owner>    = that reader's lease end, server time in ms
///                        @wq          = "a writer is waiting" until this server time (ms)
///                        The key's PEXPIRE is the latest of the lease ends above, so Redis
///                        drops it exactly when the last hold has run out. Absent when free.
///   P{N}:fence   integer fencing counter, drawn from by fencing_token() while the owner holds
///                the lock (detail/fence_scripts.hpp: expires, tokens still increase); shared
///                with the other lock kinds of the same name.
///   channel P{N}:released   the message "all" (wake every local waiter: several readers may
///                enter at once) is published when the writer leaves or the last hold
///                goes (release or expiry noticed by a script): waiters may now get in. These
///                are the only transitions that admit a waiter: a writer leaving admits readers
///                (and writers), the last reader leaving admits a writer. A hold or marker that
///                lapses unnoticed publishes nothing, so a refused attempt replies how long
///                until the first blocking hold (or the marker) may lapse: waiters sleep no
///                longer than that (detail/wake_wait.hpp).
///
/// Owners are "<instance hex>:<thread serial>:<generation>": one per object and thread, renamed
/// whenever the thread's holds have all ended (detail/owners.hpp), so a late release or renewal
/// of an earlier hold never touches a later one.
///
/// Every lease is kept per holder, as an absolute time on the server's clock (TIME inside the
/// script): a reader that crashes loses only its own hold when its lease ends, however often
/// other readers renew theirs. Every script first purges the holds whose lease has ended. No
/// client clock is ever compared with anything.
///
/// Writer preference: a writer that finds the lock busy and is going to wait sets @wq to
/// now + marker_ms (it refreshes it on every attempt while it waits; the client sends
/// marker_ms = max(wait_lease, 3 x retry_max + 100 ms) and attempts at least every
/// marker_ms / 3 while it waits). While @wq is in
/// the future, readers that hold nothing yet are refused, so the readers inside drain and the
/// writer gets in; a reader that already holds a read hold (re-entry), or the writer itself,
/// is still admitted. A writer that does not wait (try_lock(), or the last attempt before its
/// deadline) sends marker_ms 0 and sets nothing. A writer that crashes, or gives up, while
/// waiting holds new readers back for at most marker_ms.
///
/// A string at P{N} (a redislock::mutex) fails with Redis's own WRONGTYPE; a hash that is not a
/// shared lock (a reentrant lock, or foreign data) fails with a WRONGTYPE error reply. Either
/// way before anything is changed.
///
/// Every script: KEYS = {lock, fence}; ARGV[1] = owner, ARGV[2] = channel, then its own.

#include <redislock/detail/fence_scripts.hpp>
#include <redislock/detail/notify_lua.hpp>
#include <redislock/script.hpp>

#include <string>

namespace redislock::detail::shared_scripts {

// Loads the hash, checks its kind, purges ended holds; defines finish() which sets the key's
// expiry (or deletes it) and publishes (notify_lua) when someone may now get in.
inline std::string prelude() {
  return std::string(notify_lua()) + R"lua(
-- TIME followed by writes needs effects replication: the default (and only) mode since Redis 7;
-- Redis 5 and 6 switch to it here.
if redis.replicate_commands then redis.replicate_commands() end
local key, owner, channel = KEYS[1], ARGV[1], ARGV[2]
local h = redis.call('HGETALL', key)
local kind, writer, wexp, wq = false, false, 0, 0
local counts, leases = {}, {}
for i = 1, #h, 2 do
  local f, v = h[i], h[i + 1]
  local p = string.sub(f, 1, 2)
  if f == '@kind' then kind = v
  elseif f == '@w' then writer = v
  elseif f == '@wx' then wexp = tonumber(v)
  elseif f == '@wq' then wq = tonumber(v)
  elseif p == 'r:' then counts[string.sub(f, 3)] = tonumber(v)
  elseif p == 'x:' then leases[string.sub(f, 3)] = tonumber(v)
  end
end
if #h > 0 and kind ~= 'shared' then
  return redis.error_reply('WRONGTYPE redislock: ' .. key .. ' is a ' .. (kind or 'foreign hash') ..
                           ', not a shared lock')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Publish when the writer left (readers may enter) or a reader left and no holds remain.
local writer_left, reader_left = false, false
local purged = false  -- the purge changed the hash
if writer and wexp <= now then
  redis.call('HDEL', key, '@w', '@wx')
  writer, writer_left, purged = false, true, true
end
local gone = {}
for o, x in pairs(leases) do
  if x <= now then gone[#gone + 1] = o end
end
for _, o in ipairs(gone) do
  redis.call('HDEL', key, 'r:' .. o, 'x:' .. o)
  leases[o], counts[o] = nil, nil
end
if #gone > 0 then reader_left, purged = true, true end
if wq ~= 0 and wq <= now then
  redis.call('HDEL', key, '@wq')
  wq, purged = 0, true
end
-- The latest lease end among the holds (0: no holds).
local function last_hold()
  local last = 0
  if writer then last = wexp end
  for _, x in pairs(leases) do
    if x > last then last = x end
  end
  return last
end
-- changed: the script wrote to the hash (an untouched hash keeps its expiry: no write).
local function finish(changed)
  if not (changed or purged) then return end
  local holds = last_hold()
  local last = math.max(holds, wq)
  if last > now then
    redis.call('PEXPIRE', key, last - now)
  elseif #h > 0 then
    redis.call('DEL', key)
  end
  if writer_left or (reader_left and holds == 0) then notify(channel, 'all') end
end
)lua";
}

/// Write acquisition. ARGV: owner, channel, lease_ms, marker_ms.
/// Reply: {1, 0} acquired;
///        {0, ms} busy: @wq set to now + marker_ms (unless marker_ms is 0: a caller that will
///        not wait); ms = the time to the earliest lease end among the holds that block it
///        (the soonest the lock may change without a message; > 0);
///        {-1, 0} refused: the owner holds a read hold (an upgrade would deadlock).
inline const script& acquire() {
  static const script s(std::string(prelude()) + R"lua(
if counts[owner] then
  finish()
  return {-1, 0}
end
if writer and writer ~= owner or next(leases) then
  local marker = now + tonumber(ARGV[4])
  local marked = tonumber(ARGV[4]) > 0 and marker > wq
  if marked then
    wq = marker
    redis.call('HSET', key, '@wq', wq)
  end
  finish(marked)
  local first = false  -- the earliest lease end of the blocking holds
  if writer and writer ~= owner then first = wexp end
  for _, x in pairs(leases) do
    if not first or x < first then first = x end
  end
  return {0, first - now}
end
writer, wexp, wq = owner, now + tonumber(ARGV[3]), 0
redis.call('HSET', key, '@kind', 'shared', '@w', owner, '@wx', wexp)
redis.call('HDEL', key, '@wq')
finish(true)
return {1, 0}
)lua");
  return s;
}

/// Read acquisition. ARGV: owner, channel, lease_ms, count (the count after this acquisition).
/// The owner's lease becomes now + lease_ms. Admitted when there is no other writer and either
/// no writer waits, or the owner already holds a read hold or is the writer (downgrade).
/// Reply: {1, 0} acquired;
///        {0, ms} refused; ms = how long the blocking writer's lease or the waiting marker lasts
///        (> 0: ended ones were purged).
inline const script& acquire_shared() {
  static const script s(std::string(prelude()) + R"lua(
if writer and writer ~= owner then
  finish()
  return {0, wexp - now}
end
if wq ~= 0 and not counts[owner] and writer ~= owner then
  finish()
  return {0, wq - now}
end
leases[owner] = now + tonumber(ARGV[3])
redis.call('HSET', key, '@kind', 'shared', 'r:' .. owner, ARGV[4], 'x:' .. owner, leases[owner])
finish(true)
return {1, 0}
)lua");
  return s;
}

/// Write release. ARGV: owner, channel.
/// Reply: 1 released (published on channel); 0 the owner is not the writer (its lease ran out).
inline const script& release() {
  static const script s(std::string(prelude()) + R"lua(
if writer ~= owner then
  finish()
  return 0
end
redis.call('HDEL', key, '@w', '@wx')
writer, writer_left = false, true
finish(true)
return 1
)lua");
  return s;
}

/// Read release. ARGV: owner, channel, count (the count left after this release).
/// Reply: 1 released (at count 0 the owner's hold is removed; published when no holds remain);
///        0 the owner holds no read hold (its lease ran out): nothing changed.
inline const script& release_shared() {
  static const script s(std::string(prelude()) + R"lua(
if not counts[owner] then
  finish()
  return 0
end
if tonumber(ARGV[3]) > 0 then
  redis.call('HSET', key, 'r:' .. owner, ARGV[3])
else
  redis.call('HDEL', key, 'r:' .. owner, 'x:' .. owner)
  leases[owner], counts[owner], reader_left = nil, nil, true
end
finish(true)
return 1
)lua");
  return s;
}

/// Renewal. ARGV: owner, channel, lease_ms, side ("write" or "read").
/// Reply: 1 the owner's hold on that side now ends lease_ms from the server's now;
///        0 the owner holds nothing on that side (its lease ran out).
inline const script& extend() {
  static const script s(std::string(prelude()) + R"lua(
local until_ms = now + tonumber(ARGV[3])
if ARGV[4] == 'write' and writer == owner then
  wexp = until_ms
  redis.call('HSET', key, '@wx', wexp)
elseif ARGV[4] == 'read' and counts[owner] then
  leases[owner] = until_ms
  redis.call('HSET', key, 'x:' .. owner, until_ms)
else
  finish()
  return 0
end
finish(true)
return 1
)lua");
  return s;
}

/// Fencing token. ARGV: owner, channel.
/// Reply: a new token (detail/fence_scripts.hpp) while the owner holds a hold on either side;
///        0 when it holds nothing (its leases ran out).
inline const script& fence() {
  static const script s(std::string(prelude()) + next_fence_lua() + R"lua(
finish()
if writer ~= owner and not counts[owner] then return 0 end
return next_fence(KEYS[2])
)lua");
  return s;
}

/// Remaining lease. ARGV: owner, channel, side ("write" or "read").
/// Reply: ms left of the owner's hold on that side; -2 when it holds nothing there.
inline const script& remaining() {
  static const script s(std::string(prelude()) + R"lua(
finish()
if ARGV[3] == 'write' and writer == owner then return wexp - now end
if ARGV[3] == 'read' and counts[owner] and leases[owner] then return leases[owner] - now end
return -2
)lua");
  return s;
}

}  // namespace redislock::detail::shared_scripts
