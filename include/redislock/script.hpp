#pragma once
/// @file script.hpp
/// @brief redislock::script — a Lua script called by EVALSHA, loaded on demand.
///
/// The SHA-1 is computed locally, so the steady state is one EVALSHA round trip per call and
/// never EVAL or SCRIPT LOAD. When the server answers NOSCRIPT (restart, SCRIPT FLUSH,
/// failover to a replica that never saw the script), the script is loaded and the call is
/// retried, transparently: up to max_loads times, since another SCRIPT FLUSH may come between
/// a load and its retry. NOSCRIPT means the script did not run, so a retry never runs it twice.

#include <redislock/connection.hpp>
#include <redislock/detail/sha1.hpp>
#include <redislock/errors.hpp>
#include <redislock/reply.hpp>

#include <array>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace redislock {

class script {
 public:
  explicit script(std::string source) : source_(std::move(source)), sha1_(detail::sha1_hex(source_)) {}

  /// How many times one call loads the script after NOSCRIPT before it gives up (reply_error).
  static constexpr int max_loads = 3;

  const std::string& source() const noexcept { return source_; }
  const std::string& sha1() const noexcept { return sha1_; }

  /// EVALSHA with keys and args; on NOSCRIPT loads the script and retries (max_loads times).
  /// Error replies are thrown as typed exceptions.
  reply_ptr run(connection& c, std::initializer_list<std::string_view> keys,
                std::initializer_list<std::string_view> args) const {
    append(c, keys, args);
    reply_ptr r = c.read_reply();
    for (int loads = 0; loads < max_loads && is_noscript(*r); ++loads) {
      load(c);
      append(c, keys, args);
      r = c.read_reply();
    }
    if (r->type == REDIS_REPLY_ERROR && detail::is_scripting_refusal(std::string_view(r->str, r->len)))
      c.forget_scripting();
    detail::checked(*r);
    return r;
  }

  /// Appends one EVALSHA to the connection's pipeline (for batches). After reading the
  /// replies, the caller handles NOSCRIPT with is_noscript() + load() + a retry.
  void append(connection& c, std::initializer_list<std::string_view> keys,
              std::initializer_list<std::string_view> args) const {
    append(c, keys.begin(), keys.size(), args.begin(), args.size());
  }
  void append(connection& c, const std::string_view* keys, std::size_t nkeys, const std::string_view* args,
              std::size_t nargs) const {
    constexpr std::size_t inline_args = 16;
    const std::size_t argc = 3 + nkeys + nargs;
    std::array<std::string_view, inline_args> inline_argv;
    std::vector<std::string_view> heap_argv;
    std::string_view* argv = inline_argv.data();
    if (argc > inline_args) {
      heap_argv.resize(argc);
      argv = heap_argv.data();
    }
    char numkeys[24];
    const int len = std::snprintf(numkeys, sizeof numkeys, "%zu", nkeys);
    argv[0] = "EVALSHA";
    argv[1] = sha1_;
    argv[2] = std::string_view(numkeys, static_cast<std::size_t>(len));
    for (std::size_t i = 0; i < nkeys; ++i) argv[3 + i] = keys[i];
    for (std::size_t i = 0; i < nargs; ++i) argv[3 + nkeys + i] = args[i];
    c.append(argv, argc);
  }

  /// SCRIPT LOAD; checks that the server's SHA-1 matches ours.
  void load(connection& c) const {
    reply_ptr r;
    try {
      r = c.command({"SCRIPT", "LOAD", source_});
    } catch (const scripting_unavailable_error&) {
      c.forget_scripting();
      throw;
    }
    if (detail::as_string(*r) != sha1_) throw reply_error("SCRIPT LOAD returned an unexpected SHA-1");
  }

  static bool is_noscript(const redisReply& r) noexcept {
    return r.type == REDIS_REPLY_ERROR && std::string_view(r.str, r.len).substr(0, 8) == "NOSCRIPT";
  }

 private:
  std::string source_;
  std::string sha1_;
};

}  // namespace redislock
