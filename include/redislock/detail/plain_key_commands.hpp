#pragma once
/// @file detail/plain_key_commands.hpp
/// @brief The script-free commands on a lock kept as a plain string key (`P{N}` = the holder's
/// value, PX = its lease): basic_mutex's key (detail/mutex_scripts.hpp) and basic_redlock's
/// on each master (detail/redlock_scripts.hpp). Each command form is spelled here alone, for
/// the blocking and the async API, and so is the classification of the acquiring SET's reply.
///
///   acquire  `SET lock value NX GET PX lease`: nil acquired, the holder's value otherwise; or,
///            where the server refuses GET with NX (Redis before 7.0), `SET lock value NX PX
///            lease`: OK acquired, nil held (by someone: the reply cannot say whom)
///   restart  `SET lock value IFEQ expected PX lease` (Redis 8.4+, Valkey 9.0+): OK when the
///            key held `expected` (now `value`, with a fresh lease), nil otherwise
///   release  `DELEX lock IFEQ value` (Redis 8.4+) or `DELIFEQ lock value` (Valkey 9.0+):
///            1 deleted, 0 the key held something else

#include <redislock/detail/server_features.hpp>

#include <hiredis/hiredis.h>

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace redislock::detail {

/// One command as views of strings that outlive it (at most 7 arguments: no allocation).
struct command_form {
  std::array<std::string_view, 7> argv{};
  std::size_t argc = 0;

  const std::string_view* data() const noexcept { return argv.data(); }
  std::size_t size() const noexcept { return argc; }
  std::vector<std::string_view> views() const { return {argv.begin(), argv.begin() + argc}; }
  std::vector<std::string> strings() const { return {argv.begin(), argv.begin() + argc}; }
};

/// The acquisition: `SET lock value NX [GET] PX lease_ms`.
inline command_form set_nx(std::string_view lock, std::string_view value, std::string_view lease_ms, bool with_get) {
  if (with_get) return {{"SET", lock, value, "NX", "GET", "PX", lease_ms}, 7};
  return {{"SET", lock, value, "NX", "PX", lease_ms}, 6};
}

/// What the acquiring SET's reply says (`value`: what it set).
enum class set_nx_outcome {
  acquired,         ///< the key was free and now holds value
  held,             ///< another value holds it
  ours_or_unknown,  ///< it already held value (an earlier attempt's lost reply), or without GET: held by someone
  no_get,           ///< the server refused GET with NX: send it again without
  error,            ///< another error reply (the caller types it)
};

inline set_nx_outcome classify_set_nx(const redisReply& r, bool with_get, std::string_view value) noexcept {
  if (r.type == REDIS_REPLY_ERROR) {
    const bool syntax = std::string_view(r.str, r.len).find("syntax") != std::string_view::npos;
    return with_get && syntax ? set_nx_outcome::no_get : set_nx_outcome::error;
  }
  if (with_get ? r.type == REDIS_REPLY_NIL : r.type == REDIS_REPLY_STATUS) return set_nx_outcome::acquired;
  if (with_get && std::string_view(r.str, r.len) != value) return set_nx_outcome::held;
  return set_nx_outcome::ours_or_unknown;
}

/// The owner-checked lease restart: `SET lock value IFEQ expected PX lease_ms`.
inline command_form set_ifeq(std::string_view lock, std::string_view value, std::string_view expected,
                             std::string_view lease_ms) {
  return {{"SET", lock, value, "IFEQ", expected, "PX", lease_ms}, 7};
}

/// The owner-checked release: `DELEX lock IFEQ value` where `f` has DELEX, else `DELIFEQ lock value`.
inline command_form delete_ifeq(const server_features& f, std::string_view lock, std::string_view value) {
  if (f.delex) return {{"DELEX", lock, "IFEQ", value}, 4};
  return {{"DELIFEQ", lock, value}, 3};
}

}  // namespace redislock::detail
