#pragma once
/// @file detail/redlock_scripts.hpp
/// @brief Key layout and scripts of redislock::basic_redlock, on each of its N servers.
///
/// Key layout on every server, for a lock named N with key prefix P (default "redislock:"):
///
///   P{N}         string   `token` or `token#round`, PX = lease. Absent when free. token: the
///                         holder's owner token (fresh 128 random bits per attempt, hex, never
///                         '#'); round: the number of the last lease-setting round applied
///                         here (none: the acquisition, round 0). The same key as basic_mutex's:
///                         one name is one lock; do not use one name for both kinds.
///   P{N}:rfence  integer  this server's copy of the fencing register: the highest fencing
///                         token written here. Only raised, never expires.
///
/// Commands (each one round trip, sent to all servers in parallel). Every script compares only
/// the owner part (before '#'), whatever round was applied:
///   acquire  `SET P{N} token NX PX lease` (OK: acquired here; nil: held by another)
///   release  release_owned()   compare-and-delete
///   extend   extend_round()    compare-and-SET `token#round` PX lease, unless a round as
///                              recent was applied here already
///   check    remaining()       our PTTL, -2 when not ours
///   fencing  fence_read() on all, then fence_raise() on all (see basic_redlock::fencing_token)
///
/// Round numbers: a lease-setting round (extend(), the renewal) may time out on a server and
/// still reach it later (the client has dropped that connection; the command sat in a stalled
/// network path or a stopped server's receive buffer), after a later round that went out on a
/// new connection. The holder numbers its rounds 1, 2, ... per hold, one at a time; a server
/// applies a round only when it is later than the one it applied last, so a round that arrives
/// late never undoes a later round (a late short lease cannot cut a longer one the client counts
/// on). The round lives in the value, so it goes with the key: a late round finds nothing once
/// the key was released or expired, and can never bring it back.
///
/// Without scripting (a master whose connection runs no scripts: an ACL user without
/// @scripting, Valkey without Lua; each connection's features() decide, so one hold may span
/// scripted and Lua-free masters). Same key, same values; the server needs SET IFEQ with DELEX
/// (Redis 8.4+) or DELIFEQ (Valkey 9.0+), else the redlock is refused before it writes anywhere.
/// These commands compare whole values, so the holder keeps, per master, the rounds whose value
/// may be there (master_rounds: the last round answered applied there, plus every round sent
/// since without an answer) and names each:
///   acquire  `SET P{N} token NX PX lease`, as above
///   extend   `MULTI`, `SET P{N} token#r IFEQ <v> PX lease` for each candidate value v, `EXEC`:
///            one OK: applied (the candidates become {r}); all nil: none of ours is there; no
///            reply: r joins the candidates. Atomic, and at most one SET can match (the first
///            that does writes token#r, which no candidate is)
///   release  `MULTI`, `DELEX P{N} IFEQ <v>` (Redis) or `DELIFEQ P{N} <v>` (Valkey) for each
///            candidate, `EXEC`: deleted when one deleted
///   check    `MULTI GET P{N} PTTL P{N} EXEC`, the owner part compared on the client
///   fencing  refused (scripting_unavailable_error): the register must be read and raised in
///            the same step as the owner check; a majority of masters must run scripts
/// A late round still changes nothing: each round's candidates are older than it, so the round
/// on a master only rises while the key lives, and a round arriving after a later one was
/// applied there (answered or not) finds a later value than any it names. All nil is final
/// once the master answered the acquisition (lease-setting rounds never create the key); before
/// that, the acquisition's SET NX may still land, and the candidates stay. A master that leaves
/// master_rounds::max_candidates rounds in a row unanswered gets no more rounds in that hold
/// (they fail there unsent: the holder's belief only gets more cautious); the release still
/// names them all. After a failover to a replica that lags (an older value of ours there), no
/// candidate matches: that master counts as not ours (more cautious than the script, which
/// accepts any round of ours), and its stale key runs out with the lease it had.

#include <redislock/connection.hpp>
#include <redislock/detail/plain_key_commands.hpp>
#include <redislock/detail/server_features.hpp>
#include <redislock/lock_options.hpp>
#include <redislock/reply.hpp>
#include <redislock/script.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace redislock::detail::redlock_scripts {

/// Defines ours(value, token): whether a value of P{N} (false when absent) is held by token,
/// in any round.
inline const char* ours_lua() {
  return R"lua(
local function ours(v, token) return v == token or (v and string.sub(v, 1, #token + 1) == token .. '#') end
)lua";
}

/// The keys of one redlock on each server, as in the layout above.
struct keys {
  keys(std::string_view name, const lock_options& o) : lock(base_key(name, o)), fence(lock + ":rfence") {}
  std::string lock, fence;
};

/// KEYS: lock. ARGV: token, lease_ms, round (a positive integer, below 2^53).
/// Reply: 1 the lease now runs lease_ms from the server's now, and the value is token#round;
///        -1 stale: our key here already has this round or a later one (nothing written);
///        0 the lock is not ours.
inline const script& extend_round() {
  static const script s(std::string(ours_lua()) + R"lua(
local v = redis.call('GET', KEYS[1])
if not ours(v, ARGV[1]) then return 0 end
local round = tonumber(ARGV[3])
if (tonumber(string.sub(v, #ARGV[1] + 2)) or 0) >= round then return -1 end
redis.call('SET', KEYS[1], ARGV[1] .. '#' .. ARGV[3], 'PX', ARGV[2])
return 1
)lua");
  return s;
}

/// KEYS: lock. ARGV: token.
/// Reply: 1 deleted (it was ours); 0 the lock is not ours.
inline const script& release_owned() {
  static const script s(std::string(ours_lua()) + R"lua(
if ours(redis.call('GET', KEYS[1]), ARGV[1]) then return redis.call('DEL', KEYS[1]) end
return 0
)lua");
  return s;
}

/// KEYS: lock. ARGV: token.
/// Reply: the remaining lease in ms when the lock is ours (-1: no expiry); -2 when it is not.
inline const script& remaining() {
  static const script s(std::string(ours_lua()) + R"lua(
if ours(redis.call('GET', KEYS[1]), ARGV[1]) then return redis.call('PTTL', KEYS[1]) end
return -2
)lua");
  return s;
}

/// KEYS: lock, fence. ARGV: token.
/// Reply: this server's fencing register (0 when unset) while the lock here is ours; -1 when not.
inline const script& fence_read() {
  static const script s(std::string(ours_lua()) + R"lua(
if not ours(redis.call('GET', KEYS[1]), ARGV[1]) then return -1 end
return tonumber(redis.call('GET', KEYS[2]) or '0')
)lua");
  return s;
}

/// KEYS: lock, fence. ARGV: token, proposed token.
/// Reply: 0 the register was below the proposal and now holds it; -1 the lock here is not
/// ours (nothing written); a positive n: the register already holds n >= the proposal (nothing
/// written). Strictly raising makes a value win on at most one writer per server.
inline const script& fence_raise() {
  static const script s(std::string(ours_lua()) + R"lua(
if not ours(redis.call('GET', KEYS[1]), ARGV[1]) then return -1 end
local current = tonumber(redis.call('GET', KEYS[2]) or '0')
local proposed = tonumber(ARGV[2])
if current >= proposed then return current end
redis.call('SET', KEYS[2], ARGV[2])
return 0
)lua");
  return s;
}

// ---- without scripting (see "Without scripting" above) ----

/// The value round `round` of `token` writes (round 0, the acquisition: the token alone).
inline std::string value_of(std::string_view token, std::uint64_t round) {
  std::string v(token);
  if (round != 0) v.append("#").append(std::to_string(round));
  return v;
}

/// ours_lua() on the client: whether `value` is held by token, in any round.
inline bool ours(std::string_view value, std::string_view token) noexcept {
  return value.substr(0, token.size()) == token && (value.size() == token.size() || value[token.size()] == '#');
}

/// What the holder knows of its value on one master: the rounds whose value may be there now
/// or later (the last one answered applied, and every one sent since without an answer). The
/// commands without scripting compare whole values, so they name each candidate. Touched only
/// by that master's thread (detail::quorum runs one server's jobs in order), without a lock.
struct master_rounds {
  /// A master that has not answered this many rounds in a row gets no more Lua-free rounds in
  /// this hold (they fail there without being sent); the release still names them all.
  static constexpr std::size_t max_candidates = 8;

  std::vector<std::uint64_t> candidates;
  bool confirmed = false;  // a round (the acquisition included) was answered applied here
  bool complete = true;    // candidates names every round that may be there

  void acquire_sent() { candidates = {0}; }
  void applied(std::uint64_t round) {
    candidates = {round};
    confirmed = complete = true;
  }
  /// No candidate is there. Definitive once the acquisition was answered (nothing of ours can
  /// create the key again: lease-setting rounds never create it); before that, its SET NX may
  /// still land, and the rounds sent since with it.
  void none_there() {
    if (!confirmed) return;
    candidates.clear();
    complete = true;
  }
  void unanswered(std::uint64_t round) {
    if (candidates.size() < max_candidates) candidates.push_back(round);
    else complete = false;
  }
  /// A Lua-free round may be sent: it names every round that may be there, with room for one more.
  bool can_send_round() const noexcept { return complete && candidates.size() < max_candidates; }
};

/// MULTI, `commands`, EXEC in one write: returns EXEC's reply, one element per command. A
/// command refused as it is queued (-OOM, an unknown command) aborts the transaction: nothing
/// ran, its error is thrown. A refused MULTI (an ACL user without +multi) leaves no transaction:
/// each command ran at once, one by one; unless every one was refused too, what they did counts
/// as unknown (connection_error, never a reply_error, which means "nothing ran").
inline reply_ptr transaction(connection& c, const std::vector<std::vector<std::string>>& commands) {
  c.append({"MULTI"});
  for (const auto& command : commands) c.append(std::vector<std::string_view>(command.begin(), command.end()));
  c.append({"EXEC"});
  const reply_ptr multi = c.read_reply();
  std::string refused = is_error(*multi) ? std::string(multi->str, multi->len) : std::string();
  bool ran_alone = false;  // a command ran outside a transaction
  for (std::size_t i = 0; i < commands.size(); ++i) {
    const reply_ptr r = c.read_reply();
    if (!is_error(*r)) ran_alone = ran_alone || is_error(*multi);
    else if (refused.empty()) refused.assign(r->str, r->len);
  }
  reply_ptr exec = c.read_reply();
  if (ran_alone)
    throw connection_error("MULTI refused on " + c.options().endpoint() + " (" + refused +
                           "): the commands ran one by one, outside a transaction; what they did is unknown");
  if (!refused.empty()) throw_reply_error(refused);
  checked(*exec);
  if (exec->type != REDIS_REPLY_ARRAY || exec->elements != commands.size())
    throw reply_error("unexpected EXEC reply (wanted " + std::to_string(commands.size()) + " replies)");
  for (std::size_t i = 0; i < exec->elements; ++i) checked(*exec->element[i]);
  return exec;
}

/// extend_round() without a script: `SET lock token#round IFEQ <candidate> PX lease_ms` for each
/// candidate, in one transaction (at most one can match: the first that does writes a value no
/// other candidate has). True: applied; false: no candidate is there.
inline bool set_round_without_script(connection& c, std::string_view lock, std::string_view token, std::uint64_t round,
                                     std::string_view lease_ms, const std::vector<std::uint64_t>& candidates) {
  const std::string next = value_of(token, round);
  std::vector<std::vector<std::string>> sets;
  for (const std::uint64_t k : candidates) sets.push_back(set_ifeq(lock, next, value_of(token, k), lease_ms).strings());
  const reply_ptr r = transaction(c, sets);
  for (std::size_t i = 0; i < r->elements; ++i)
    if (r->element[i]->type == REDIS_REPLY_STATUS) return true;
  return false;
}

/// release_owned() without a script: `DELEX lock IFEQ <candidate>` (Redis) or `DELIFEQ lock
/// <candidate>` (Valkey) for each candidate, in one transaction. True: deleted.
inline bool release_without_script(connection& c, const server_features& f, std::string_view lock,
                                   std::string_view token, const std::vector<std::uint64_t>& candidates) {
  std::vector<std::vector<std::string>> deletes;
  for (const std::uint64_t k : candidates) deletes.push_back(delete_ifeq(f, lock, value_of(token, k)).strings());
  const reply_ptr r = transaction(c, deletes);
  for (std::size_t i = 0; i < r->elements; ++i)
    if (as_integer(*r->element[i]) == 1) return true;
  return false;
}

/// remaining() without a script: `MULTI GET PTTL EXEC`, the owner checked here (any round).
inline std::int64_t remaining_without_script(connection& c, std::string_view lock, std::string_view token) {
  const reply_ptr r = transaction(c, {{"GET", std::string(lock)}, {"PTTL", std::string(lock)}});
  const redisReply& value = *r->element[0];
  if (value.type != REDIS_REPLY_STRING || !ours(std::string_view(value.str, value.len), token)) return -2;
  return as_integer(*r->element[1]);
}

}  // namespace redislock::detail::redlock_scripts
