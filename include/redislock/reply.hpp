#pragma once
/// @file reply.hpp
/// @brief Owned hiredis replies and small accessors that throw typed errors.

#include <redislock/errors.hpp>

#include <hiredis/hiredis.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace redislock {

struct reply_deleter {
  void operator()(redisReply* r) const noexcept {
    if (r != nullptr) freeReplyObject(r);
  }
};

/// A reply owned by unique_ptr; freed with freeReplyObject.
using reply_ptr = std::unique_ptr<redisReply, reply_deleter>;

namespace detail {

inline bool is_error(const redisReply& r) noexcept { return r.type == REDIS_REPLY_ERROR; }

/// Throws the typed exception for an error reply; returns the reply otherwise.
inline const redisReply& checked(const redisReply& r) {
  if (is_error(r)) throw_reply_error(std::string(r.str, r.len));
  return r;
}

inline std::int64_t as_integer(const redisReply& r) {
  checked(r);
  if (r.type != REDIS_REPLY_INTEGER) throw reply_error("unexpected reply type (wanted an integer)");
  return r.integer;
}

inline std::string_view as_string(const redisReply& r) {
  checked(r);
  if (r.type != REDIS_REPLY_STRING && r.type != REDIS_REPLY_STATUS)
    throw reply_error("unexpected reply type (wanted a string)");
  return {r.str, r.len};
}

inline const redisReply& element(const redisReply& r, std::size_t i) {
  checked(r);
  if (r.type != REDIS_REPLY_ARRAY || i >= r.elements)
    throw reply_error("unexpected reply shape (wanted an array of at least " + std::to_string(i + 1) + ")");
  return *r.element[i];
}

}  // namespace detail
}  // namespace redislock
