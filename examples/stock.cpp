// Several worker processes sell from one stock count. Each sale is a non-atomic
// read-check-write (GET stock, decide, SET stock-1, RPUSH the order), as in a real service
// that reads a row, thinks, and writes it back. Run once without the lock and once with it:
// without it, processes sell the same unit twice; with redislock::mutex, never.
//
// Usage: stock [--uri redis://...] [--workers N] [--orders N]
//        (the URI defaults to $REDISLOCK_URL, then redis://127.0.0.1:6379)
#include <redislock/redislock.hpp>
#include "server_url.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

struct settings {
  std::string uri;
  int workers = 6;
  int orders = 400;  // orders placed in total; stock is half of that, so it sells out
};

long read_long(redislock::connection& c, const std::string& key) {
  redislock::reply_ptr r = c.command({"GET", key});
  return r->type == REDIS_REPLY_NIL ? 0 : std::stol(std::string(r->str, r->len));
}

// One worker process: tries to place its share of the orders.
int sell(const settings& s, int worker, bool use_lock) {
  redislock::client redis(s.uri);
  redislock::mutex stock_lock(redis, "stock:widget");
  redislock::connection data(redislock::parse_uri(s.uri));
  const int my_orders = s.orders / s.workers;
  for (int i = 0; i < my_orders; ++i) {
    const std::string order = std::to_string(worker) + "-" + std::to_string(i);
    std::unique_lock<redislock::mutex> guard(stock_lock, std::defer_lock);
    if (use_lock) guard.lock();
    const long stock = read_long(data, "stock:widget:count");
    if (stock <= 0) break;      // sold out
    std::this_thread::yield();  // the "thinking" between read and write
    data.command({"SET", "stock:widget:count", std::to_string(stock - 1)});
    // Which unit this order got: the stock count it saw. Two orders with one unit = oversold.
    data.command({"RPUSH", "stock:widget:sold", std::to_string(stock) + " " + order});
  }
  return 0;
}

// Runs all workers as separate processes and reports what was sold.
bool run(const settings& s, bool use_lock) {
  redislock::connection admin(redislock::parse_uri(s.uri));
  const long initial = s.orders / 2;
  admin.command({"DEL", "stock:widget:sold"});
  admin.command({"SET", "stock:widget:count", std::to_string(initial)});

  std::vector<pid_t> children;
  for (int w = 0; w < s.workers; ++w) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int rc = 1;
      try {
        rc = sell(s, w, use_lock);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "worker %d: %s\n", w, e.what());
      }
      std::_Exit(rc);
    }
    children.push_back(pid);
  }
  bool workers_ok = true;
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    workers_ok = workers_ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }

  redislock::reply_ptr sold = admin.command({"LRANGE", "stock:widget:sold", "0", "-1"});
  std::set<std::string> units;
  for (std::size_t i = 0; i < sold->elements; ++i) {
    std::string entry(sold->element[i]->str, sold->element[i]->len);
    units.insert(entry.substr(0, entry.find(' ')));
  }
  const long orders_taken = static_cast<long>(sold->elements);
  const long oversold = orders_taken - static_cast<long>(units.size());
  std::printf("%-12s stock %ld, orders accepted %ld, distinct units sold %zu, sold twice %ld, left %ld  => %s\n",
              use_lock ? "with lock:" : "without lock:", initial, orders_taken, units.size(), oversold,
              read_long(admin, "stock:widget:count"), oversold == 0 ? "OK" : "OVERSOLD");
  return workers_ok && oversold == 0;
}

}  // namespace

int main(int argc, char** argv) {
  settings s;
  const char* env = server_url_from_env();
  s.uri = env ? env : "redis://127.0.0.1:6379";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--uri")) s.uri = argv[i + 1];
    else if (!std::strcmp(argv[i], "--workers")) s.workers = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--orders")) s.orders = std::atoi(argv[i + 1]);
  }
  if (s.workers < 1 || s.orders < s.workers) {
    std::fprintf(stderr, "usage: stock [--uri URI] [--workers N] [--orders N >= N]\n");
    return 2;
  }
  try {
    std::printf("%d worker processes, %d orders, one stock count on %s\n", s.workers, s.orders,
                redislock::parse_uri(s.uri).endpoint().c_str());
    run(s, /*use_lock=*/false);                 // shows the race the lock exists for
    const bool ok = run(s, /*use_lock=*/true);  // must never oversell
    return ok ? 0 : 1;
  } catch (const redislock::error& e) {
    std::fprintf(stderr, "stock: %s\n", e.what());
    return 1;
  }
}
