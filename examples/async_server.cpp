// An asio TCP server whose request handler takes a lock per request by co_await (C++20), on
// one loop thread: every "buy" request reads the stock, does some slow work (a timer), and
// writes it back, under the distributed lock "stock", so neither the handlers interleaving on
// this loop nor other processes running the same server oversell. The program also plays the
// clients: 8 connections, 25 requests each, against 100 items in stock.
// Usage: async_server [redis://host:port]   (default: $REDISLOCK_URL, then redis://127.0.0.1:6379)
#include <redislock/asio.hpp>
#include "server_url.hpp"

#include <asio/buffer.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read_until.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>

using asio::awaitable;
using asio::use_awaitable;
using asio::ip::tcp;

namespace {

int stock = 100;  // the shared resource (in a real service: a database row)
int sold = 0;

// One request: the lock, the read-modify-write with slow work in the middle, the release.
awaitable<std::string> buy(redislock::async_mutex& lock) {
  redislock::async_hold hold = co_await lock.async_lock(use_awaitable);
  const int left = stock;
  asio::steady_timer work(co_await asio::this_coro::executor, std::chrono::milliseconds(1));
  co_await work.async_wait(use_awaitable);  // other handlers run meanwhile
  std::string reply = left > 0 ? "sold\n" : "sold out\n";
  if (left > 0) {
    stock = left - 1;
    ++sold;
  }
  co_await hold.async_unlock(use_awaitable);
  co_return reply;
}

awaitable<void> session(tcp::socket socket, redislock::async_mutex& lock) {
  std::string line;
  try {
    for (;;) {
      const std::size_t n = co_await asio::async_read_until(socket, asio::dynamic_buffer(line), '\n', use_awaitable);
      line.erase(0, n);
      const std::string reply = co_await buy(lock);
      co_await asio::async_write(socket, asio::buffer(reply), use_awaitable);
    }
  } catch (const std::system_error&) {  // the client closed the connection
  }
}

awaitable<void> serve(tcp::acceptor& acceptor, redislock::async_mutex& lock) {
  for (;;) {
    tcp::socket socket = co_await acceptor.async_accept(use_awaitable);
    asio::co_spawn(acceptor.get_executor(), session(std::move(socket), lock), asio::detached);
  }
}

awaitable<int> customer(tcp::endpoint server, int requests) {
  tcp::socket socket(co_await asio::this_coro::executor);
  co_await socket.async_connect(server, use_awaitable);
  int bought = 0;
  std::string line;
  for (int i = 0; i < requests; ++i) {
    co_await asio::async_write(socket, asio::buffer(std::string("buy\n")), use_awaitable);
    const std::size_t n = co_await asio::async_read_until(socket, asio::dynamic_buffer(line), '\n', use_awaitable);
    if (line.compare(0, n, "sold\n") == 0) ++bought;
    line.erase(0, n);
  }
  co_return bought;
}

}  // namespace

int main(int argc, char** argv) {
  const char* uri = argc > 1 ? argv[1] : server_url_from_env();
  asio::io_context io;
  redislock::async_client redis(io.get_executor(), {redislock::parse_uri(uri ? uri : "redis://127.0.0.1:6379")});
  redislock::async_mutex lock(redis, "stock");
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  asio::co_spawn(io, serve(acceptor, lock), asio::detached);

  constexpr int kCustomers = 8, kRequests = 25;
  int bought = 0, finished = 0;
  for (int i = 0; i < kCustomers; ++i) {
    asio::co_spawn(io, customer(acceptor.local_endpoint(), kRequests), [&](std::exception_ptr e, int n) {
      if (e) std::cerr << "a customer failed\n";
      bought += n;
      if (++finished == kCustomers) io.stop();
    });
  }
  io.run();
  std::cout << kCustomers * kRequests << " requests: sold " << sold << ", customers got " << bought << ", stock left "
            << stock << (sold == 100 && bought == sold && stock == 0 ? " => OK" : " => WRONG") << "\n";
  return sold == 100 && bought == sold && stock == 0 ? 0 : 1;
}
