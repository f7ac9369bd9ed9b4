#pragma once
// What is stored on a server, read through an admin connection: single values and hash
// fields, every key, and snapshots to compare before / after (equal: nothing was written).

#include <redislock/connection.hpp>
#include <redislock/reply.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace redislock_test {

inline std::string reply_text(const redisReply& r) { return std::string(r.str, r.len); }

/// GET key; "(nil)" when absent.
inline std::string string_value(redislock::connection& c, const std::string& key) {
  redislock::reply_ptr r = c.command({"GET", key});
  return r->type == REDIS_REPLY_NIL ? std::string("(nil)") : reply_text(*r);
}

/// HGET key field; "(nil)" when absent.
inline std::string hget(redislock::connection& c, const std::string& key, const std::string& field) {
  redislock::reply_ptr r = c.command({"HGET", key, field});
  return r->type == REDIS_REPLY_NIL ? std::string("(nil)") : reply_text(*r);
}

inline bool hexists(redislock::connection& c, const std::string& key, const std::string& field) {
  return c.command({"HEXISTS", key, field})->integer == 1;
}

/// Every field and value of a hash as "field=value", sorted.
inline std::vector<std::string> hash_fields(redislock::connection& c, const std::string& key) {
  redislock::reply_ptr r = c.command({"HGETALL", key});
  std::vector<std::string> out;
  for (std::size_t i = 0; i + 1 < r->elements; i += 2)
    out.push_back(reply_text(*r->element[i]) + "=" + reply_text(*r->element[i + 1]));
  std::sort(out.begin(), out.end());
  return out;
}

/// Every key (KEYS *), sorted.
inline std::vector<std::string> all_keys(redislock::connection& c) {
  redislock::reply_ptr r = c.command({"KEYS", "*"});
  std::vector<std::string> out;
  for (std::size_t i = 0; i < r->elements; ++i) out.push_back(reply_text(*r->element[i]));
  std::sort(out.begin(), out.end());
  return out;
}

/// Every key with its DUMP (TTLs left out), sorted: equal snapshots mean nothing was written.
inline std::vector<std::string> key_dump(redislock::connection& c) {
  std::vector<std::string> out;
  for (const std::string& key : all_keys(c)) {
    redislock::reply_ptr d = c.command({"DUMP", key});
    out.push_back(key + "=" + (d->type == REDIS_REPLY_STRING ? reply_text(*d) : std::string("(gone)")));
  }
  return out;
}

}  // namespace redislock_test
