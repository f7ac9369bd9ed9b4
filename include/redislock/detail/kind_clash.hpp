#pragma once
/// @file detail/kind_clash.hpp
/// @brief Which kind holds a lock's name, and the one place where a WRONGTYPE refusal becomes
/// the wrong_type_error that names the lock, that kind and the kind asked for.
///
/// The kind of a name is told by kind_of_lock() (Lua: TYPE, then a hash's @kind field, then a
/// zset's "#permits" member), the same function inspect() runs first in each of its scripts
/// (detail/lock_info_scripts.hpp); kind_named() reads its answer. A lock kind's commands fail
/// with WRONGTYPE when the name holds another kind: from its own script ("WRONGTYPE redislock:
/// <key> is a <kind>, not a <kind>"), or Redis's own (a string key under a hash kind's script,
/// the mutex's SET NX on a hash). Either way run_on_lock() (every command the kinds built on
/// lock_core send goes through it, and the latch's) asks held_kind() once, on that error's
/// path only, and throws the named error; when that look-up fails too (a connection lost
/// meanwhile, a server without scripts) the error still names the lock and the asked kind.

#include <redislock/connection.hpp>
#include <redislock/errors.hpp>
#include <redislock/lock_kind.hpp>
#include <redislock/reply.hpp>
#include <redislock/script.hpp>

#include <string>
#include <string_view>
#include <utility>

namespace redislock::detail {

/// Defines kind_of_lock(): the kind of KEYS[1] as "none" (absent), "mutex" (a string),
/// "reentrant", "shared", "latch", "election" (hashes told apart by @kind), "semaphore" (a zset
/// with the "#permits" member), or "foreign <type>".
inline const char* kind_of_lock_lua() {
  return R"lua(
local function kind_of_lock()
  local t = redis.call('TYPE', KEYS[1])['ok']
  if t == 'none' then return 'none' end
  if t == 'string' then return 'mutex' end
  if t == 'hash' then
    local k = redis.call('HGET', KEYS[1], '@kind')
    if k == 'reentrant' or k == 'shared' or k == 'latch' or k == 'election' then return k end
    return 'foreign hash'
  end
  if t == 'zset' and redis.call('ZSCORE', KEYS[1], '#permits') then return 'semaphore' end
  return 'foreign ' .. t
end
)lua";
}

/// The lock_kind kind_of_lock() named; for "foreign <type>", `type` gets the type.
inline lock_kind kind_named(std::string_view name, std::string& type) {
  for (lock_kind k : {lock_kind::none, lock_kind::mutex, lock_kind::reentrant, lock_kind::shared, lock_kind::semaphore,
                      lock_kind::latch, lock_kind::election})
    if (name == to_string(k)) return k;
  const auto space = name.find(' ');
  type = std::string(space == std::string_view::npos ? name : name.substr(space + 1));
  return lock_kind::foreign;
}

/// KEYS = {lock}. Reply: kind_of_lock() of it. Read-only.
inline const script& kind_script() {
  static const script s(std::string(kind_of_lock_lua()) + "return kind_of_lock()\n");
  return s;
}

/// What holds a lock key: its kind, and the Redis type when that is foreign.
struct held_by {
  lock_kind kind = lock_kind::none;
  std::string type;
};

/// What kind_script() replied (throws reply_error for an error reply).
inline held_by held_from(const redisReply& reply) {
  held_by h;
  h.kind = kind_named(as_string(reply), h.type);
  return h;
}

/// One round trip: what holds `key` now. Throws as the client's run() does.
template <class Client>
held_by held_kind(Client& client, const std::string& key) {
  return client.run(key, [&](connection& c) { return held_from(*kind_script().run(c, {key}, {})); });
}

/// Rethrows `e` as the wrong_type_error naming lock `name` and the kind `asked` (`asked_noun`:
/// how to call it when not by its kind, e.g. "redlock"), with what holds the name as
/// `look_up()` (returning held_by) tells; when look_up() throws, with the holder unknown. An
/// error that names its lock already is rethrown as it is. Call it from a catch block.
template <class LookUp>
[[noreturn]] void throw_kind_clash(const wrong_type_error& e, const std::string& name, lock_kind asked,
                                   std::string_view asked_noun, LookUp&& look_up) {
  if (!e.lock_name().empty()) throw e;
  held_by held;
  try {
    held = look_up();
  } catch (...) {  // told as unknown
    held = held_by{};
  }
  throw wrong_type_error(e.server_message(), name, held.kind, std::move(held.type), asked, asked_noun);
}

/// client.run(key, f) for lock `name` of kind `asked`: a WRONGTYPE refusal becomes the named
/// wrong_type_error (throw_kind_clash, looking up what holds `key`).
template <class Client, class F>
auto run_on_lock(Client& client, const std::string& key, const std::string& name, lock_kind asked, F&& f)
    -> decltype(client.run(key, std::forward<F>(f))) {
  try {
    return client.run(key, std::forward<F>(f));
  } catch (const wrong_type_error& e) {
    throw_kind_clash(e, name, asked, {}, [&] { return held_kind(client, key); });
  }
}

}  // namespace redislock::detail
