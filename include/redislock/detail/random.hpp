#pragma once
/// @file detail/random.hpp
/// @brief Owner tokens: 128 bits from the kernel's CSPRNG, hex-encoded.

#include <redislock/errors.hpp>

#include <sys/random.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>

namespace redislock::detail {

inline void fill_random(unsigned char* out, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    ssize_t r = ::getrandom(out + got, n - got, 0);
    if (r > 0) {
      got += static_cast<std::size_t>(r);
    } else if (r < 0 && errno == EINTR) {
      continue;
    } else {
      // getrandom is missing (very old kernel): std::random_device reads /dev/urandom on
      // libstdc++/libc++ for Linux, which is the same CSPRNG.
      std::random_device dev;
      while (got < n) out[got++] = static_cast<unsigned char>(dev());
    }
  }
}

/// 128 random bits as 32 lowercase hex characters.
inline std::string random_token() {
  unsigned char bytes[16];
  fill_random(bytes, sizeof bytes);
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (std::size_t i = 0; i < sizeof bytes; ++i) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 0xf];
  }
  return out;
}

/// Owner tokens for the successive acquisitions of one lock object: 128 random bits drawn once,
/// then ":<n>" with a counter, so each token is unique without a system call per acquisition.
/// (Anyone who can read the lock key sees the current token anyway; what matters is that no
/// two acquisitions, by any object, ever share one.)
class token_sequence {
 public:
  token_sequence() : id_(random_token()) {}
  std::string next() { return id_ + ':' + std::to_string(++count_); }
  /// The random part shared by all tokens of the sequence.
  const std::string& id() const noexcept { return id_; }

 private:
  std::string id_;
  unsigned long long count_ = 0;
};

}  // namespace redislock::detail
