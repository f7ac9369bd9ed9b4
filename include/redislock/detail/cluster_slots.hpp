#pragma once
/// @file detail/cluster_slots.hpp
/// @brief Redis Cluster hash slots (CRC16-XMODEM of the key's hash tag, mod 16384) and the
/// slot map read from CLUSTER SLOTS.

#include <redislock/errors.hpp>
#include <redislock/reply.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace redislock::detail {

inline constexpr int cluster_slot_count = 16384;

/// CRC16-XMODEM (polynomial 0x1021, initial value 0, no reflection): the checksum Redis
/// Cluster uses for key slots. Bitwise: a few hundred ns per key, far below one round trip.
inline std::uint16_t crc16_xmodem(std::string_view data) noexcept {
  std::uint16_t crc = 0;
  for (char c : data) {
    crc = static_cast<std::uint16_t>(crc ^ (static_cast<std::uint16_t>(static_cast<unsigned char>(c)) << 8));
    for (int bit = 0; bit < 8; ++bit) crc = static_cast<std::uint16_t>((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
  }
  return crc;
}

/// The part of `key` that is hashed: the text between the first '{' and the next '}' when
/// that text is non-empty, else the whole key (the rule of the Redis Cluster specification).
inline std::string_view hash_tag_of(std::string_view key) noexcept {
  const std::size_t open = key.find('{');
  if (open == std::string_view::npos) return key;
  const std::size_t close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return key;
  return key.substr(open + 1, close - open - 1);
}

/// The cluster slot of `key` (what CLUSTER KEYSLOT answers).
inline int key_slot(std::string_view key) noexcept { return crc16_xmodem(hash_tag_of(key)) % cluster_slot_count; }

/// One range of CLUSTER SLOTS: its slots and the master's address.
struct slot_range {
  int first = 0, last = 0;
  std::string host;
  int port = 0;
};

/// Parses a CLUSTER SLOTS reply. An empty host (a node that does not know its own address,
/// Redis 7: "the same address you asked") becomes `asked_host`. Throws reply_error on a reply
/// of another shape.
inline std::vector<slot_range> parse_cluster_slots(const redisReply& r, const std::string& asked_host) {
  auto bad = [] { return reply_error("CLUSTER SLOTS: unexpected reply shape"); };
  if (r.type != REDIS_REPLY_ARRAY) throw bad();
  std::vector<slot_range> ranges;
  for (std::size_t i = 0; i < r.elements; ++i) {
    const redisReply& e = *r.element[i];
    if (e.type != REDIS_REPLY_ARRAY || e.elements < 3 || e.element[0]->type != REDIS_REPLY_INTEGER ||
        e.element[1]->type != REDIS_REPLY_INTEGER || e.element[2]->type != REDIS_REPLY_ARRAY ||
        e.element[2]->elements < 2)
      throw bad();
    const redisReply& master = *e.element[2];
    if (master.element[0]->type != REDIS_REPLY_STRING || master.element[1]->type != REDIS_REPLY_INTEGER) throw bad();
    slot_range s;
    s.first = static_cast<int>(e.element[0]->integer);
    s.last = static_cast<int>(e.element[1]->integer);
    s.host.assign(master.element[0]->str, master.element[0]->len);
    if (s.host.empty() || s.host == "?") s.host = asked_host;
    s.port = static_cast<int>(master.element[1]->integer);
    if (s.first < 0 || s.last >= cluster_slot_count || s.first > s.last || s.port <= 0 || s.port > 65535) throw bad();
    ranges.push_back(std::move(s));
  }
  return ranges;
}

}  // namespace redislock::detail
