#pragma once
// Diagnosis of a finding that does not recur: every command one server runs (MONITOR, scripts'
// inner commands included), stamped with the checker's clock on arrival, kept in memory for one
// run and written out only when the run found something. REDISLOCK_MODEL_MONITOR=<directory>
// turns it on (single topology); it slows the server, so it is off by default.

#include "checks.hpp"

#include <redislock/options.hpp>

#include <hiredis/hiredis.h>

#include <poll.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace redislock_model {

class command_monitor {
 public:
  explicit command_monitor(const redislock::connection_options& o) {
    context_ = redisConnect(o.host.c_str(), o.port);
    if (context_ == nullptr || context_->err != 0) return;
    redisReply* ok = static_cast<redisReply*>(redisCommand(context_, "MONITOR"));
    if (ok == nullptr) return;
    freeReplyObject(ok);
    reader_ = std::thread([this] { read(); });
  }
  ~command_monitor() {
    stop_ = true;
    if (reader_.joinable()) reader_.join();
    if (context_ != nullptr) redisFree(context_);
  }
  command_monitor(const command_monitor&) = delete;
  command_monitor& operator=(const command_monitor&) = delete;

  /// Stops reading and writes every line to `path`, its time in ms from `t0_ns`.
  void write(const std::string& path, std::int64_t t0_ns) {
    stop_ = true;
    if (reader_.joinable()) reader_.join();
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) return;
    for (const auto& [at, line] : lines_)
      std::fprintf(f, "%10.3f ms  %s\n", static_cast<double>(at - t0_ns) / 1e6, line.c_str());
    std::fclose(f);
  }

 private:
  void read() {
    while (!stop_) {
      void* reply = nullptr;
      if (redisGetReplyFromReader(context_, &reply) != REDIS_OK) return;
      if (reply != nullptr) {
        auto* r = static_cast<redisReply*>(reply);
        if (r->type == REDIS_REPLY_STATUS) lines_.emplace_back(now_ns(), std::string(r->str, r->len));
        freeReplyObject(r);
        continue;
      }
      pollfd p{context_->fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      if (redisBufferRead(context_) != REDIS_OK) return;
    }
  }

  redisContext* context_ = nullptr;
  std::thread reader_;
  std::atomic<bool> stop_{false};
  std::vector<std::pair<std::int64_t, std::string>> lines_;  // the reader's until it is joined
};

}  // namespace redislock_model
