#pragma once
// Reaches a mutex's private state: mutex.hpp makes detail::mutex_test_access a friend and leaves
// it to the tests to define, here and only here (a program's files must agree on it).

#include <redislock/mutex.hpp>

#include <string>

struct redislock::detail::mutex_test_access {
  // As after the server refused SET NX GET (Redis before 7.0).
  template <class Client>
  static void without_set_get(basic_mutex<Client>& m) {
    m.set_get_supported_.store(false);
  }
  // The token of the object's current (or next) acquisition.
  template <class Client>
  static std::string token(const basic_mutex<Client>& m) {
    return m.current_token();
  }
  // The subscription the object keeps for its next wait, and its channel.
  template <class Client>
  static subscriber::subscription& subscription(basic_mutex<Client>& m) {
    return m.channel_subscription_;
  }
  template <class Client>
  static const std::string& channel(basic_mutex<Client>& m) {
    return m.channel_;
  }
};
