#pragma once
/// @file errors.hpp
/// @brief The exception hierarchy. Every exception the library throws derives from
/// redislock::error, itself a std::runtime_error.
///
///   error
///   ├── invalid_argument      bad input, rejected before anything is sent to Redis
///   ├── connection_error      cannot connect, I/O failure, connection closed
///   │   ├── timeout_error     connect (TLS handshake included) or command timeout, pool wait timeout
///   │   ├── discovery_error   no Sentinel could name the master (sentinel_client)
///   │   └── tls_error         TLS set-up or handshake refused: certificate not trusted or issued
///   │                         for another name, unreadable CA/certificate/key files
///   ├── reply_error           the server answered with an error reply (text kept verbatim)
///   │   ├── noscript_error    NOSCRIPT: script cache empty (handled inside the library)
///   │   ├── wrong_type_error  WRONGTYPE: the lock's name is another kind of lock, or other data
///   │   │                     (lock_name(), held_kind(), asked_kind(); what() names all three)
///   │   ├── auth_error        NOAUTH / WRONGPASS / NOPERM
///   │   │   └── scripting_unavailable_error  the server runs no Lua scripts for this connection
///   │   │                     (an ACL user without @scripting, Valkey without its Lua engine)
///   │   │                     and what was asked has no Lua-free form
///   │   ├── server_version_error  the server is too old for what was asked (the message names
///   │   │                     the version needed)
///   │   └── redirect_error    MOVED / ASK (Redis Cluster)
///   ├── lock_error            ownership misuse (unlocking or extending a lock not held)
///   ├── latch_error           a latch refused the call: count_down past zero (latch.hpp)
///   │   ├── latch_mismatch_error  the name is a latch created with another count
///   │   └── latch_expired_error   the latch's lease ended (or it was made anew) before it opened
///   └── replication_error     lock_options::min_replicas not reached: the hold was released
///
/// Messages never contain passwords.

#include <redislock/lock_kind.hpp>

#include <stdexcept>
#include <string>
#include <string_view>

namespace redislock {

namespace detail {

/// The user-facing name of a kind: "mutex", "reentrant mutex", "shared mutex", "semaphore",
/// "latch", "election" ("" for none and foreign).
inline std::string_view kind_noun(lock_kind k) noexcept {
  switch (k) {
    case lock_kind::mutex: return "mutex";
    case lock_kind::reentrant: return "reentrant mutex";
    case lock_kind::shared: return "shared mutex";
    case lock_kind::semaphore: return "semaphore";
    case lock_kind::latch: return "latch";
    case lock_kind::election: return "election";
    case lock_kind::none:
    case lock_kind::foreign: break;
  }
  return "";
}

/// "a <noun>" or "an <noun>".
inline std::string with_article(std::string_view noun) {
  const bool vowel = !noun.empty() && std::string_view("aeiou").find(noun[0]) != std::string_view::npos;
  return (vowel ? "an " : "a ") + std::string(noun);
}

/// wrong_type_error's what(): "'orders' is a semaphore; a mutex cannot use it", "'orders'
/// holds a Redis hash that is not a redislock lock; a mutex cannot use it", or, when what holds
/// the name could not be told (held none, or the asked kind itself: it changed meanwhile),
/// "'orders' is another kind of lock, or other data; a mutex cannot use it".
inline std::string kind_clash_message(std::string_view name, lock_kind held, std::string_view held_type,
                                      lock_kind asked, std::string_view asked_noun) {
  const std::string who = "'" + std::string(name) + "' ";
  std::string what;
  if (held == lock_kind::foreign)
    what =
        who + "holds a Redis " + std::string(held_type.empty() ? "value" : held_type) + " that is not a redislock lock";
  else if (held == lock_kind::none || held == asked) what = who + "is another kind of lock, or other data";
  else what = who + "is " + with_article(kind_noun(held));
  return what + "; " + with_article(asked_noun.empty() ? kind_noun(asked) : asked_noun) + " cannot use it";
}

}  // namespace detail

class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class invalid_argument : public error {
 public:
  using error::error;
};

class connection_error : public error {
 public:
  using error::error;
};

class timeout_error : public connection_error {
 public:
  using connection_error::connection_error;
};

/// TLS could not be established for a reason retrying will not fix: the server's certificate
/// is not trusted or names another host, or the configured CA/certificate/key cannot be used.
/// A connection_error, so code that handles those keeps working.
class tls_error : public connection_error {
 public:
  using connection_error::connection_error;
};

/// An error reply from the server. server_message() is the server's text exactly.
class reply_error : public error {
 public:
  explicit reply_error(std::string server_message)
      : error("redis error reply: " + server_message), server_message_(std::move(server_message)) {}
  reply_error(std::string server_message, const std::string& what)
      : error(what), server_message_(std::move(server_message)) {}
  const std::string& server_message() const noexcept { return server_message_; }

 private:
  std::string server_message_;
};

class noscript_error : public reply_error {
 public:
  using reply_error::reply_error;
};

/// WRONGTYPE: the lock's name is held by another kind of lock (a semaphore's name used as a
/// mutex), or by data that is not a redislock lock. Every lock kind throws it with the lock's
/// name, the kind that holds the name and the kind asked for, what() reading
/// "'orders' is a semaphore; a mutex cannot use it" (detail/kind_clash.hpp: the kind holding
/// the name is looked up on this error's path only, one round trip). server_message() is the
/// server's reply verbatim. Thrown by a bare command (connection::command, script::run), it
/// names nothing: lock_name() empty, both kinds none.
class wrong_type_error : public reply_error {
 public:
  using reply_error::reply_error;
  /// `held`: none when it could not be told (the look-up failed, or the name changed kind
  /// meanwhile); `type`: the key's Redis TYPE when held is foreign. `asked_noun`: how
  /// what() names the asked kind when not by kind_noun(asked) (a redlock asks as a mutex).
  wrong_type_error(std::string server_message, std::string name, lock_kind held, std::string type, lock_kind asked,
                   std::string_view asked_noun = {})
      : reply_error(std::move(server_message), detail::kind_clash_message(name, held, type, asked, asked_noun)),
        lock_name_(std::move(name)),
        held_type_(std::move(type)),
        held_(held),
        asked_(asked) {}
  /// The lock's name ("" from a bare command).
  const std::string& lock_name() const noexcept { return lock_name_; }
  /// The kind that holds the name: foreign for other data (held_type() says which), none when
  /// unknown.
  lock_kind held_kind() const noexcept { return held_; }
  /// held_kind() foreign: the key's Redis type ("hash", "list", ...); "" otherwise.
  const std::string& held_type() const noexcept { return held_type_; }
  /// The kind that was asked for (a redlock: mutex, the key it would write); none from a bare command.
  lock_kind asked_kind() const noexcept { return asked_; }

 private:
  std::string lock_name_, held_type_;
  lock_kind held_ = lock_kind::none, asked_ = lock_kind::none;
};

class auth_error : public reply_error {
 public:
  using reply_error::reply_error;
};

/// The server refused something it does not have yet: what() names the server version needed,
/// server_message() is the server's refusal. Retrying does not help; upgrading the server does.
class server_version_error : public reply_error {
 public:
  server_version_error(std::string server_message, const std::string& needed)
      : reply_error(std::move(server_message), needed) {}
};

/// The server runs no scripts for this connection: an ACL user without @scripting (NOPERM on
/// EVAL/EVALSHA/SCRIPT) or Valkey without its Lua engine (built with BUILD_LUA=no, or the lua
/// module unloaded). Thrown where what was asked needs a script (reentrant, shared and fair locks,
/// fencing tokens), or where the Lua-free path needs what the server lacks; basic_mutex
/// otherwise takes its Lua-free path (docs/servers.md). An auth_error (such a NOPERM was one
/// before the Lua-free path existed). server_message() is the server's refusal, if any.
class scripting_unavailable_error : public auth_error {
 public:
  using auth_error::auth_error;
};

/// MOVED or ASK from a Redis Cluster node: the key's slot lives elsewhere.
class redirect_error : public reply_error {
 public:
  explicit redirect_error(std::string server_message) : reply_error(std::move(server_message)) {
    // "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381"
    const std::string& m = this->server_message();
    ask_ = m.compare(0, 3, "ASK") == 0;
    auto first = m.find(' ');
    auto second = first == std::string::npos ? std::string::npos : m.find(' ', first + 1);
    if (second != std::string::npos) {
      slot_ = 0;  // parsed by hand: a malformed reply must not throw a non-redislock exception
      for (std::size_t i = first + 1; i < second && slot_ >= 0; ++i)
        slot_ = (m[i] >= '0' && m[i] <= '9' && slot_ < 16384) ? slot_ * 10 + (m[i] - '0') : -1;
      if (slot_ >= 16384) slot_ = -1;  // the last digit can take it past the slot range
      endpoint_ = m.substr(second + 1);
    }
  }
  bool is_ask() const noexcept { return ask_; }
  int slot() const noexcept { return slot_; }
  /// "host:port" of the node that owns the slot.
  const std::string& endpoint() const noexcept { return endpoint_; }

 private:
  bool ask_ = false;
  int slot_ = -1;
  std::string endpoint_;
};

class lock_error : public error {
 public:
  using error::error;
};

/// basic_latch (latch.hpp): a count_down larger than the count left; nothing changed.
class latch_error : public error {
 public:
  using error::error;
};

/// basic_latch: the name is a latch created with another count (initial()); nothing changed.
class latch_mismatch_error : public latch_error {
 public:
  latch_mismatch_error(std::string what, long long initial) : latch_error(std::move(what)), initial_(initial) {}
  long long initial() const noexcept { return initial_; }

 private:
  long long initial_;
};

/// basic_latch: the latch this object created or joined is gone (its lease ended before it
/// opened, or ended after it opened and someone made a new latch of the name). Never reported
/// as open.
class latch_expired_error : public latch_error {
 public:
  using latch_error::latch_error;
};

/// sentinel_client: no Sentinel answered with the master's address (all down, unreachable,
/// refusing our credentials, or none knows the service name). The message names each one's
/// answer.
class discovery_error : public connection_error {
 public:
  using connection_error::connection_error;
};

/// An acquisition reached fewer replicas than lock_options::min_replicas asked for within
/// lock_options::replica_timeout. The hold was released (owner-checked) before this was
/// thrown: the caller does not hold the lock (when that release could not reach Redis, the
/// lease runs out on its own; the lock's last_release() says which).
class replication_error : public error {
 public:
  replication_error(std::string what, int required, int acknowledged)
      : error(std::move(what)), required_(required), acknowledged_(acknowledged) {}
  int required() const noexcept { return required_; }
  int acknowledged() const noexcept { return acknowledged_; }

 private:
  int required_, acknowledged_;
};

namespace detail {

inline bool starts_with(std::string_view s, std::string_view prefix) noexcept {
  return s.substr(0, prefix.size()) == prefix;
}

/// The error a script's command raised, out of Redis 6's wrapper around it: "ERR Error running
/// script (call to f_<sha1>): @user_script:<line>: <the command's error>" (an ACL denial adds
/// "@user_script: <line>: " once more). Redis 7 forwards the command's error code first.
inline std::string_view script_error_cause(std::string_view message) noexcept {
  if (!starts_with(message, "ERR Error running script (call to ")) return message;
  for (std::size_t at = message.find("@user_script:"); at != std::string_view::npos;
       at = starts_with(message, "@user_script:") ? 0 : std::string_view::npos) {
    const std::size_t end = message.find(": ", at + 13);  // past "@user_script:" and the line
    if (end == std::string_view::npos) break;
    message.remove_prefix(end + 2);
  }
  return message;
}

/// True for the refusals that mean "no scripts here": Valkey without its Lua engine ("ERR Could
/// not find scripting engine 'lua'"), or an ACL user without @scripting (NOPERM on EVAL,
/// EVALSHA, SCRIPT or FCALL, not on a key).
inline bool is_scripting_refusal(std::string_view message) noexcept {
  if (starts_with(message, "ERR Could not find scripting engine")) return true;
  if (!starts_with(message, "NOPERM")) return false;
  for (std::string_view command : {"'eval", "'script|", "'script'", "'fcall"})
    if (message.find(command) != std::string_view::npos) return true;
  return false;
}

/// The one place where a server error reply becomes a typed exception.
[[noreturn]] inline void throw_reply_error(std::string message) {
  if (is_scripting_refusal(message))
    throw scripting_unavailable_error(message, "the server runs no Lua scripts for this connection (" + message +
                                                   "): an ACL user needs @scripting, Valkey its Lua engine; "
                                                   "this needs a script (see docs/servers.md, the Lua-free path)");
  const std::string_view cause = script_error_cause(message);
  if (starts_with(cause, "NOSCRIPT")) throw noscript_error(std::move(message));
  if (starts_with(cause, "WRONGTYPE")) throw wrong_type_error(std::move(message));
  if (starts_with(cause, "NOAUTH") || starts_with(cause, "WRONGPASS") || starts_with(cause, "NOPERM") ||
      starts_with(cause, "ERR invalid password") || starts_with(cause, "ERR AUTH") ||
      // An ACL denial inside a script: Redis 7.0 words it as ERR, later 7.x as NOPERM, Redis 8
      // and Valkey 9 as "ACL failure in script", Redis 6 without a code (after its wrapper).
      starts_with(cause, "ERR The user executing the script can't") ||
      starts_with(cause, "The user executing the script can't") || starts_with(cause, "ERR ACL failure in script"))
    throw auth_error(std::move(message));
  if (starts_with(message, "MOVED ") || starts_with(message, "ASK ")) throw redirect_error(std::move(message));
  throw reply_error(std::move(message));
}

}  // namespace detail
}  // namespace redislock
