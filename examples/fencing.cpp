// Fencing tokens: a lease alone cannot stop a holder that was paused (GC, swapped out, a
// stalled VM) past its lease from writing after someone else took the lock. The storage must
// reject the late write; the lock's fencing token makes that possible.
// Usage: fencing [redis://host:port]   (default: $REDISLOCK_URL, then redis://127.0.0.1:6379)
#include <redislock/redislock.hpp>
#include "server_url.hpp"

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>

namespace {

// The storage: a Redis value that accepts a write only with a token at least as high as the
// highest it has seen. Any store with a conditional write works the same way (a SQL
// "UPDATE ... WHERE fence <= ?", an object store's precondition, ...).
class fenced_store {
 public:
  fenced_store(redislock::client& redis, std::string key)
      : redis_(redis), key_(std::move(key)), fence_key_(key_ + ":fence") {}

  /// True when the write was accepted; false when a newer holder has written already.
  bool write(std::uint64_t token, const std::string& value) {
    const std::string t = std::to_string(token);
    return redis_.run(key_, [&](redislock::connection& c) {
      return write_script().run(c, {key_, fence_key_}, {t, value})->integer;  // run() threw on an error reply
    }) == 1;
  }

  std::string read() {
    redislock::reply_ptr r = redis_.command({"GET", key_});
    return r->type == REDIS_REPLY_NIL ? "(nil)" : std::string(r->str, r->len);
  }

 private:
  // KEYS: value, highest token seen. ARGV: token, value.
  // Reply: 1 written (the token is now the highest seen); 0 rejected (a higher token wrote).
  // Tokens compare as Lua numbers: exact up to 2^53 acquisitions.
  static const redislock::script& write_script() {
    static const redislock::script s(R"lua(
if tonumber(ARGV[1]) < tonumber(redis.call('GET', KEYS[2]) or '0') then return 0 end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('SET', KEYS[1], ARGV[2])
return 1
)lua");
    return s;
  }

  redislock::client& redis_;
  std::string key_, fence_key_;
};

}  // namespace

int main(int argc, char** argv) {
  const char* uri = argc > 1 ? argv[1] : server_url_from_env();
  redislock::client redis(uri ? uri : "redis://127.0.0.1:6379");
  fenced_store ledger(redis, "fencing-example:{ledger}");
  redislock::lock_options short_lease;
  short_lease.lease = std::chrono::milliseconds(300);
  redislock::mutex alice(redis, "ledger", short_lease), bob(redis, "ledger", short_lease);

  alice.lock();
  const std::uint64_t alice_token = alice.fencing_token();
  std::cout << "alice holds the lock, token " << alice_token << ", and pauses before writing...\n";

  // While alice is paused her lease runs out and bob takes the lock with a higher token.
  if (!bob.try_lock_for(std::chrono::seconds(10))) {
    std::cerr << "bob never got the lock\n";
    return 1;
  }
  std::cout << "bob holds the lock, token " << bob.fencing_token() << "\n";
  const bool bob_written = ledger.write(bob.fencing_token(), "written by bob");
  std::cout << "bob's write: " << (bob_written ? "accepted" : "rejected") << "\n";
  bob.unlock();

  // Alice resumes, still believing she holds the lock, and writes with her old token.
  const bool alice_written = ledger.write(alice_token, "written by alice (stale)");
  std::cout << "alice's late write: " << (alice_written ? "ACCEPTED" : "rejected") << "\n";
  alice.unlock();
  std::cout << "alice's release: " << to_string(alice.last_release()) << "\n";
  std::cout << "ledger: " << ledger.read() << "\n";

  const bool correct = bob_written && !alice_written && ledger.read() == "written by bob" &&
                       alice.last_release() == redislock::release_status::lease_expired;
  return correct ? 0 : 1;
}
