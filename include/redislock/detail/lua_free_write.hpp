#pragma once
/// @file detail/lua_free_write.hpp
/// @brief The Lua-free path's first write (basic_mutex and redlock without scripts), made only
/// where the hold it takes could also be released.
///
/// Without scripts a hold is released with `DELEX key IFEQ token` (Redis 8.4+) or `DELIFEQ key
/// token` (Valkey 9.0+). The server version says these commands exist; it does not say that
/// this user may run them on this key: an ACL can refuse them (`-delex`, `-@write` with `+set`,
/// a key pattern). A `SET NX` written by such a user could not be released: the lock would stay
/// taken for a whole lease. So the acquiring SET is sent in a transaction behind that release,
/// run on the empty value (no token is empty: it deletes nothing). The server checks each
/// command of a transaction against the user's ACL as it queues it, and runs none of them when
/// one is refused: the refusal costs no write and no extra round trip. A user refused MULTI (the
/// Lua-free remaining_lease() needs it too) gets both commands run one by one: the SET counts
/// only where the release ran as well.

#include <redislock/connection.hpp>
#include <redislock/detail/plain_key_commands.hpp>
#include <redislock/detail/server_features.hpp>
#include <redislock/errors.hpp>
#include <redislock/reply.hpp>

#include <hiredis/hiredis.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace redislock::detail {

/// Sends `set` (an acquiring SET on `lock`) as above and returns its reply. Throws
/// scripting_unavailable_error when the user may not run the release on `lock` (`who`, e.g.
/// "lock 'x'", starts its message), with nothing written unless MULTI was refused as well (the
/// message then says so); any other error reply as throw_reply_error() types it.
inline reply_ptr write_if_releasable(connection& c, const server_features& f, std::string_view lock,
                                     const std::vector<std::string_view>& set, const std::string& who) {
  c.append({"MULTI"});
  const command_form probe = delete_ifeq(f, lock, "");  // deletes nothing: no token is empty
  c.append(probe.data(), probe.size());
  c.append(set.data(), set.size());
  c.append({"EXEC"});
  const reply_ptr multi = c.read_reply(), release = c.read_reply();
  reply_ptr written = c.read_reply();
  const reply_ptr exec = c.read_reply();
  const bool alone = is_error(*multi);  // no transaction: each command ran as it came
  const std::string refusal = is_error(*release) ? std::string(release->str, release->len) : std::string();
  if (starts_with(refusal, "NOPERM")) {
    throw scripting_unavailable_error(
        refusal, who + ": " + f.describe() +
                     " runs no scripts for this connection, and the Lua-free path releases with " +
                     (f.delex ? "DELEX" : "DELIFEQ") + ", which this user may not run on key '" + std::string(lock) +
                     "' (" + refusal + "): " +
                     (alone ? "MULTI was refused too, so the SET ran alone: the key may hold our token until its "
                              "lease ends"
                            : "nothing was written"));
  }
  if (!alone && !refusal.empty()) throw_reply_error(refusal);  // refused as it was queued: nothing ran
  if (is_error(*written)) throw_reply_error(std::string(written->str, written->len));
  if (!alone) {
    checked(*exec);
    if (exec->type != REDIS_REPLY_ARRAY || exec->elements != 2) throw reply_error("unexpected reply to EXEC");
    written.reset(std::exchange(exec->element[1], nullptr));  // freeReplyObject skips a null element
    checked(*written);
  }
  return written;
}

}  // namespace redislock::detail
