// The redislock command-line tool, driven as a real binary (posix_spawn) against a real
// redis-server: exclusion between runs, exit statuses, the environment, lease loss, signal
// forwarding, status and break. Waits are on pipes and process exits, each bounded.

#include "eventually.hpp"
#include "redis_cluster.hpp"
#include "sentinel_topology.hpp"
#include "server_fixture.hpp"
#include "tcp_proxy.hpp"

#include <redislock/detail/cluster_slots.hpp>
#include <redislock/lock_info.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace test_cli {

namespace {

using namespace std::chrono_literals;
using redislock_test::server_test;

const std::chrono::milliseconds bound = 20s;  // generous: the machine is shared

/// One run of the tool: stdout (COMMAND's too) and stderr on pipes, stdin from /dev/null.
class tool {
 public:
  /// stdin_path: what the tool reads as stdin (default /dev/null; a pty's name for a terminal).
  /// wrapper: a command that runs the tool (e.g. setpriv with its options), none by default.
  explicit tool(const std::vector<std::string>& args, const std::string& url,
                const std::string& stdin_path = "/dev/null", const std::vector<std::string>& wrapper = {}) {
    std::vector<std::string> argv(wrapper);
    argv.push_back(REDISLOCK_CLI);
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e)
      if (std::string(*e).rfind("REDISLOCK_URL=", 0) != 0) env.emplace_back(*e);
    if (!url.empty()) env.push_back("REDISLOCK_URL=" + url);
    std::vector<char*> a, e;
    for (auto& s : argv) a.push_back(s.data());
    a.push_back(nullptr);
    for (auto& s : env) e.push_back(s.data());
    e.push_back(nullptr);
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, stdin_path.c_str(), O_RDWR | O_NOCTTY, 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&fa, err[1], STDERR_FILENO);
    const int rc = posix_spawn(&pid_, a[0], &fa, nullptr, a.data(), e.data());
    posix_spawn_file_actions_destroy(&fa);
    ::close(out[1]);
    ::close(err[1]);
    out_ = out[0];
    err_ = err[0];
    if (rc != 0) throw std::runtime_error("cannot spawn the tool");
    pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
  }
  ~tool() {
    if (status_ < 0) {
      ::kill(pid_, SIGKILL);
      wait(bound);
    }
    ::close(out_);
    ::close(err_);
    if (pidfd_ >= 0) ::close(pidfd_);
  }
  tool(const tool&) = delete;
  tool& operator=(const tool&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int sig) const { ::kill(pid_, sig); }
  /// One line of stdout, waiting at most `timeout`.
  std::string line(std::chrono::milliseconds timeout = bound) { return redislock_test::read_line(out_, timeout); }
  /// One line of stderr, waiting at most `timeout`.
  std::string err_line(std::chrono::milliseconds timeout = bound) { return redislock_test::read_line(err_, timeout); }

  /// The exit status (128+N for signal N), or -1 when it did not exit within `timeout`.
  int wait(std::chrono::milliseconds timeout = bound) {
    if (status_ >= 0) return status_;
    pollfd p{pidfd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return -1;
    int st = 0;
    if (::waitpid(pid_, &st, 0) != pid_) return -1;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    out_text_ += drain(out_);
    err_text_ += drain(err_);
    return status_;
  }
  const std::string& out() const { return out_text_; }
  const std::string& err() const { return err_text_; }

 private:
  static std::string drain(int fd) {
    std::string s;
    char buf[4096];
    for (;;) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 5000) <= 0) break;
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) break;
      s.append(buf, static_cast<std::size_t>(n));
    }
    return s;
  }
  pid_t pid_ = -1;
  int pidfd_ = -1, out_ = -1, err_ = -1;
  int status_ = -1;
  std::string out_text_, err_text_;
};

struct cli_test : server_test {
  std::string url() const { return server->uri(); }
  /// Runs the tool to its end; the test fails if it takes longer than `bound`.
  struct result {
    int status;
    std::string out, err;
  };
  result run(const std::vector<std::string>& args, const std::string& with_url = "") {
    tool t(args, with_url.empty() ? url() : with_url);
    const int status = t.wait();
    EXPECT_GE(status, 0) << "the tool did not finish";
    return {status, t.out(), t.err()};
  }
  long long connections() {
    auto r = admin->command({"INFO", "stats"});
    const std::string text(r->str, r->len);
    const auto pos = text.find("total_connections_received:");
    return std::stoll(text.substr(pos + 27));
  }
  std::string temp_file(const std::string& tag) {
    const std::string path = ::testing::TempDir() + "redislock_cli_" + std::to_string(::getpid()) + "_" + tag;
    std::remove(path.c_str());
    return path;
  }
  /// The pid a command wrote to `path`.
  static pid_t pid_in(const std::string& path) { return static_cast<pid_t>(std::stol(slurp(path))); }
  static std::string slurp(const std::string& path) {
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  bool exists(const std::string& key) { return admin->command({"EXISTS", key})->integer == 1; }
};

// A minimal look into the JSON of `status --json`: the text after "key": up to , } or ].
std::string json_field(const std::string& json, const std::string& key, std::size_t from = 0) {
  const std::string needle = "\"" + key + "\":";
  const auto pos = json.find(needle, from);
  if (pos == std::string::npos) return "(absent)";
  const auto start = pos + needle.size();
  const auto end = json.find_first_of(",}]", start);
  return json.substr(start, end - start);
}

// A shell child that says "ready" on stdout and then loops until a signal ends it.
std::vector<std::string> ready_loop(const std::string& traps = "") {
  return {"sh", "-c", traps + "echo ready; while :; do sleep 0.02; done"};
}

TEST_F(cli_test, BadInputIsOneLineAndExitTwoBeforeRedisIsTouched) {
  const std::vector<std::vector<std::string>> bad = {
      {},
      {"frobnicate"},
      {"run"},
      {"run", "job"},
      {"run", "job", "true"},
      {"run", "job", "--"},
      {"run", "", "--", "true"},
      {"run", "}job", "--", "true"},
      {"run", "--bogus", "job", "--", "true"},
      {"run", "--lease", "5parsecs", "job", "--", "true"},
      {"run", "--lease", "0s", "job", "--", "true"},
      {"run", "--wait", "-1s", "job", "--", "true"},
      {"run", "--lease", "", "job", "--", "true"},
      {"run", "--kill-after", "1..5s", "job", "--", "true"},
      {"run", "--fence-lifetime", "0s", "job", "--", "true"},
      {"run", "--fence-lifetime", "721h", "job", "--", "true"},
      {"run", "--conflict-exit-code", "256", "job", "--", "true"},
      {"run", "--on-lost", "sulk", "job", "--", "true"},
      {"run", "--url", "http://127.0.0.1:1", "job", "--", "true"},
      {"run", "--lease"},
      {"status"},
      {"status", "--bogus", "job"},
      {"status", "--count", "2", "job"},
      {"status", "--watch", "--interval", "10ms", "job"},
      {"status", "--watch", "--interval", "2h", "job"},
      {"status", "--watch", "--count", "0", "job"},
      {"top", "a", "b"},
      {"top", "--max-keys", "0"},
      {"top", "--scan-count", "100000"},
      {"status", "--url", "redis://127.0.0.1:notaport", "job"},
      {"break"},
      {"break", "a", "b", "--yes"},
  };
  const long long before = connections();
  for (const auto& args : bad) {
    std::string shown;
    for (const auto& a : args) shown += "'" + a + "' ";
    const result r = run(args);
    EXPECT_EQ(r.status, 2) << shown << r.err;
    EXPECT_EQ(r.err.rfind("redislock: ", 0), 0u) << shown << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << shown << r.err;
    EXPECT_TRUE(r.out.empty()) << shown;
  }
  EXPECT_EQ(connections(), before) << "a bad command line reached Redis";
  EXPECT_FALSE(exists("redislock:{job}"));
}

TEST_F(cli_test, BadUrlFromTheEnvironmentIsAUsageError) {
  const result r = run({"status", "job"}, "redis://:pw@127.0.0.1:1/notadb");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(r.err.find("pw"), std::string::npos) << "the password must not be shown: " << r.err;
}

TEST_F(cli_test, HelpPagesHaveExamples) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{{"--help"},
                                                                                    {"help", "run"},
                                                                                    {"run", "--help"},
                                                                                    {"elect", "--help"},
                                                                                    {"status", "--help"},
                                                                                    {"break", "-h"}}) {
    const result r = run(args);
    EXPECT_EQ(r.status, 0) << args[0];
    EXPECT_NE(r.out.find("SYNOPSIS"), std::string::npos) << args[0];
    EXPECT_NE(r.out.find("EXIT STATUS"), std::string::npos) << args[0];
    EXPECT_NE(r.out.find("EXAMPLES"), std::string::npos) << args[0];
    EXPECT_TRUE(r.err.empty());
  }
}

TEST_F(cli_test, UnreachableRedisIsOneLineAndExit69) {
  const std::string nowhere = "redis://127.0.0.1:" + std::to_string(redislock_test::free_port());
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"run", "job", "--", "true"}, {"status", "job"}, {"break", "--yes", "job"}}) {
    const result r = run(args, nowhere);
    EXPECT_EQ(r.status, 69) << args[0] << ": " << r.err;
    EXPECT_NE(r.err.find("cannot reach Redis"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

TEST_F(cli_test, CommandGetsNameTokenAndLeaseAndItsStatusIsReturned) {
  const result r = run({"run", "--lease", "1.5s", "job", "--", "sh", "-c",
                        "echo \"$REDISLOCK_NAME|$REDISLOCK_FENCING_TOKEN|$REDISLOCK_LEASE_MS\"; exit 3"});
  EXPECT_EQ(r.status, 3) << r.err;
  ASSERT_EQ(r.out.rfind("job|", 0), 0u) << r.out;
  const std::string token = r.out.substr(4, r.out.find('|', 4) - 4);
  EXPECT_GT(std::stoull(token), 0u);
  EXPECT_EQ(r.out, "job|" + token + "|1500\n");
  EXPECT_FALSE(exists("redislock:{job}")) << "released after the command";
  const result again = run({"run", "job", "--", "sh", "-c", "echo $REDISLOCK_FENCING_TOKEN"});
  EXPECT_GT(std::stoull(again.out), std::stoull(token)) << "tokens increase per acquisition";
  const long long counter_ttl = admin->command({"PTTL", "redislock:{job}:fence"})->integer;
  EXPECT_GT(counter_ttl, 86400000 - 60000) << "the counter's default lifetime: 1 day";
  EXPECT_LE(counter_ttl, 86400000);
  EXPECT_EQ(run({"run", "--fence-lifetime", "720h", "job", "--", "true"}).status, 0);
  EXPECT_GT(admin->command({"PTTL", "redislock:{job}:fence"})->integer, 29LL * 86400000) << "--fence-lifetime";

  EXPECT_EQ(run({"run", "job", "--", "sh", "-c", "kill -KILL $$"}).status, 128 + SIGKILL);
  EXPECT_EQ(run({"run", "job", "--", "true"}).status, 0);
  const result missing = run({"run", "job", "--", "/nonexistent/command"});
  EXPECT_EQ(missing.status, 127) << missing.err;
  EXPECT_NE(missing.err.find("cannot run"), std::string::npos);
  EXPECT_EQ(run({"run", "job", "--", "no-such-command-in-path"}).status, 127);
  EXPECT_EQ(run({"run", "job", "--", "/dev/null"}).status, 126) << "not executable";
  EXPECT_FALSE(exists("redislock:{job}")) << "released when the command could not start";
}

TEST_F(cli_test, NotObtainedGivesTheConflictCode) {
  redislock::mutex holder(*pool, "job");
  holder.lock();
  const result r = run({"run", "--no-wait", "job", "--", "echo", "ran"});
  EXPECT_EQ(r.status, 75) << r.err;
  EXPECT_TRUE(r.out.empty()) << "the command must not run";
  EXPECT_NE(r.err.find("held by someone else"), std::string::npos);
  EXPECT_EQ(run({"run", "--no-wait", "--conflict-exit-code", "0", "job", "--", "echo", "ran"}).status, 0);
  EXPECT_EQ(run({"run", "--wait", "150ms", "--conflict-exit-code", "9", "job", "--", "echo", "ran"}).status, 9);
  holder.unlock();
  EXPECT_EQ(run({"run", "--no-wait", "job", "--", "echo", "ran"}).out, "ran\n");
}

// `elect` runs COMMAND while it leads: the leader's value and term are what the library's
// observers read, another leader means the conflict code, COMMAND's end resigns, and a lost
// leadership stops COMMAND (exit 76).
TEST_F(cli_test, ElectRunsTheCommandWhileItLeads) {
  const result once = run({"elect", "sched", "--value", "host-a", "--", "sh", "-c", "echo $REDISLOCK_FENCING_TOKEN"});
  EXPECT_EQ(once.status, 0) << once.err;
  const std::uint64_t first_term = std::stoull(once.out);
  EXPECT_FALSE(exists("redislock:{sched}")) << "resigned when the command ended";

  redislock::election library(*pool, "sched");
  ASSERT_TRUE(library.try_campaign("library"));
  const result busy = run({"elect", "--no-wait", "sched", "--", "echo", "ran"});
  EXPECT_EQ(busy.status, 75) << busy.err;
  EXPECT_TRUE(busy.out.empty());
  EXPECT_NE(busy.err.find("has another leader"), std::string::npos) << busy.err;
  library.resign();

  tool t({"elect", "--lease", "1500ms", "sched", "--value", "host-b", "--", "sh", "-c",
          "echo $REDISLOCK_FENCING_TOKEN; echo ready; while :; do sleep 0.02; done"},
         url());
  const std::string term = t.line();
  ASSERT_EQ(t.line(), "ready");
  const std::optional<redislock::leader_info> l = library.leader();
  ASSERT_TRUE(l);
  EXPECT_EQ(l->value, "host-b");
  EXPECT_EQ(std::to_string(l->term), term);
  EXPECT_GT(l->term, first_term);
  const result status = run({"status", "sched"});
  EXPECT_EQ(status.status, 0) << status.err;
  EXPECT_NE(status.out.find("sched: held (election)\n  leader " + l->owner + " (object "), std::string::npos)
      << status.out;
  admin->command({"DEL", "redislock:{sched}"});  // leadership taken away: COMMAND is stopped
  EXPECT_EQ(t.wait(), 76) << t.err();
  EXPECT_NE(t.err().find("lost the lock 'sched'"), std::string::npos) << t.err();
  EXPECT_EQ(run({"elect", "--shared", "sched", "--", "true"}).status, 2) << "elect takes no lock kind";
}

// Children record when they start and end; no two intervals of the same NAME may overlap.
TEST_F(cli_test, ConcurrentRunsOfOneNameNeverOverlap) {
  constexpr int runs = 4;
  std::vector<std::string> files;
  std::vector<std::unique_ptr<tool>> tools;
  for (int i = 0; i < runs; ++i) {
    files.push_back(temp_file("overlap" + std::to_string(i)));
    tools.push_back(std::make_unique<tool>(
        std::vector<std::string>{"run", "--lease", "2s", "job", "--", "sh", "-c",
                                 "date +%s%N > " + files.back() + "; sleep 0.15; date +%s%N >> " + files.back()},
        url()));
  }
  for (auto& t : tools) ASSERT_EQ(t->wait(), 0) << t->err();
  std::vector<std::pair<long long, long long>> spans;
  for (const auto& f : files) {
    long long start = 0, end = 0;
    std::ifstream in(f);
    ASSERT_TRUE(in >> start >> end) << f;
    spans.emplace_back(start, end);
  }
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i)
    EXPECT_LT(spans[i - 1].second, spans[i].first) << "runs " << i - 1 << " and " << i << " overlapped";
}

TEST_F(cli_test, SharedRunsHoldTogetherAndExcludeTheWriter) {
  auto args = ready_loop();
  args.insert(args.begin(), {"run", "--shared", "cat", "--"});
  tool a(args, url());
  tool b(args, url());
  ASSERT_EQ(a.line(), "ready");
  ASSERT_EQ(b.line(), "ready");
  const result w = run({"run", "--write", "--no-wait", "cat", "--", "true"});
  EXPECT_EQ(w.status, 75) << w.err;
  const result s = run({"status", "--json", "cat"});
  EXPECT_EQ(s.status, 0);
  EXPECT_EQ(json_field(s.out, "kind"), "\"shared\"");
  EXPECT_NE(s.out.find("\"role\":\"reader\""), s.out.rfind("\"role\":\"reader\"")) << "two readers: " << s.out;
  a.signal(SIGTERM);
  b.signal(SIGTERM);
  EXPECT_EQ(a.wait(), 128 + SIGTERM);
  EXPECT_EQ(b.wait(), 128 + SIGTERM);
  EXPECT_EQ(run({"run", "--write", "--no-wait", "cat", "--", "true"}).status, 0);
}

TEST_F(cli_test, PermitsLetAtMostNRunsHoldAtOnce) {
  EXPECT_EQ(run({"run", "--permits", "2", "--shared", "enc", "--", "true"}).status, 2);
  EXPECT_EQ(run({"run", "--permits", "0", "enc", "--", "true"}).status, 2);
  auto args = ready_loop();
  args.insert(args.begin(), {"run", "--permits", "2", "enc", "--"});
  tool a(args, url());
  tool b(args, url());
  ASSERT_EQ(a.line(), "ready");
  ASSERT_EQ(b.line(), "ready");
  const result third = run({"run", "--permits", "2", "--no-wait", "enc", "--", "true"});
  EXPECT_EQ(third.status, 75) << third.err;
  EXPECT_EQ(third.err, "redislock: the semaphore 'enc': 2 of 2 permits held\n");
  // Another count than the stored one: it seeds an idle semaphore only, and the refusal says so.
  const result more = run({"run", "--permits", "3", "--no-wait", "enc", "--", "true"});
  EXPECT_EQ(more.status, 75) << more.err;
  EXPECT_EQ(more.err,
            "redislock: the semaphore 'enc': 2 of 2 permits held (stored count 2; --permits 3 applies when the "
            "semaphore is idle)\n");
  // Another kind on the semaphore's name: named, with both kinds.
  const result as_mutex = run({"run", "--no-wait", "enc", "--", "true"});
  EXPECT_EQ(as_mutex.status, 69) << as_mutex.err;
  EXPECT_EQ(as_mutex.err, "redislock: 'enc' is a semaphore; a mutex cannot use it\n");
  const result as_reader = run({"run", "--shared", "--no-wait", "enc", "--", "true"});
  EXPECT_EQ(as_reader.err, "redislock: 'enc' is a semaphore; a shared mutex cannot use it\n");
  const result as_leader = run({"elect", "--no-wait", "enc", "--", "true"});
  EXPECT_EQ(as_leader.err, "redislock: 'enc' is a semaphore; an election cannot use it\n");
  const result s = run({"status", "--json", "enc"});
  EXPECT_EQ(s.status, 0);
  EXPECT_EQ(json_field(s.out, "kind"), "\"semaphore\"");
  EXPECT_EQ(json_field(s.out, "permits"), "2");
  EXPECT_NE(s.out.find("\"role\":\"holder\""), s.out.rfind("\"role\":\"holder\"")) << "two holders: " << s.out;
  const result t = run({"status", "enc"});
  EXPECT_NE(t.out.find("2 of 2 permits"), std::string::npos) << t.out;
  a.signal(SIGTERM);
  EXPECT_EQ(a.wait(), 128 + SIGTERM);
  EXPECT_EQ(run({"run", "--permits", "2", "--no-wait", "enc", "--", "true"}).status, 0);
  b.signal(SIGTERM);
  EXPECT_EQ(b.wait(), 128 + SIGTERM);
  EXPECT_FALSE(exists("redislock:{enc}"));
}

TEST_F(cli_test, SignalsAreForwardedToTheCommand) {
  {
    tool t({"run", "job", "--", "sh", "-c", "trap 'exit 4' INT; echo ready; while :; do sleep 0.02; done"}, url());
    ASSERT_EQ(t.line(), "ready");
    t.signal(SIGINT);
    EXPECT_EQ(t.wait(), 4) << t.err();
  }
  for (int sig : {SIGTERM, SIGHUP}) {
    auto args = ready_loop();
    args.insert(args.begin(), {"run", "job", "--"});
    tool t(args, url());
    ASSERT_EQ(t.line(), "ready");
    t.signal(sig);
    EXPECT_EQ(t.wait(), 128 + sig) << t.err();
    EXPECT_FALSE(exists("redislock:{job}")) << "released after the forwarded signal ended the command";
  }
}

TEST_F(cli_test, InterruptedWhileWaitingExitsWithoutRunning) {
  redislock::mutex holder(*pool, "job");
  holder.lock();
  tool t({"run", "job", "--", "echo", "ran"}, url());
  // The tool is waiting once it queued on the server.
  ASSERT_TRUE(redislock_test::eventually(
      [&] {
        return admin->command({"ZCARD", "redislock:{job}:queue"})->integer == 1;
      },
      bound));
  t.signal(SIGINT);
  EXPECT_EQ(t.wait(), 128 + SIGINT);
  EXPECT_TRUE(t.out().empty());
  holder.unlock();
  EXPECT_FALSE(exists("redislock:{job}")) << "nobody left to hand the lock to";
}

// A run whose command writes TERM to `marker` on SIGTERM and exits 5 (lease 1.5 s, kill-after 0.5 s).
std::vector<std::string> records_sigterm(const std::string& marker) {
  return {"run",    "--lease",
          "1500ms", "--kill-after",
          "500ms",  "job",
          "--",     "sh",
          "-c",     "trap 'echo TERM > " + marker + "; exit 5' TERM; echo ready; while :; do sleep 0.02; done"};
}

// The lock is taken from under the tool while its lease is still confirmed (deleted, then
// taken by another client): its next renewal finds it gone and the command gets SIGTERM.
TEST_F(cli_test, LostLeaseTerminatesTheCommand) {
  const std::string marker = temp_file("lost");
  tool t(records_sigterm(marker), url());
  ASSERT_EQ(t.line(), "ready");
  admin->command({"DEL", "redislock:{job}"});
  redislock::mutex other(*pool, "job");
  ASSERT_TRUE(other.try_lock());
  EXPECT_EQ(t.wait(), 76) << t.err();
  EXPECT_EQ(slurp(marker), "TERM\n") << "the command got SIGTERM";
  EXPECT_NE(t.err().find("lost the lock 'job'"), std::string::npos) << t.err();
  EXPECT_TRUE(other.still_held()) << "the tool must not release the new holder's lock";
}

// The tool is stopped past its lease (its renewals stop with it), another client takes the
// lock, and the tool resumes: the lease may have run out already, so the command gets SIGKILL
// at once, without SIGTERM and its --kill-after grace (it would run on beside the new holder).
TEST_F(cli_test, LeaseThatMayHaveRunOutKillsTheCommandWithoutGrace) {
  const std::string marker = temp_file("late");
  tool t(records_sigterm(marker), url());
  ASSERT_EQ(t.line(), "ready");
  t.signal(SIGSTOP);
  ASSERT_TRUE(redislock_test::eventually([&] { return !exists("redislock:{job}"); }, bound)) << "lease never ran out";
  redislock::mutex other(*pool, "job");
  ASSERT_TRUE(other.try_lock());
  t.signal(SIGCONT);
  EXPECT_EQ(t.wait(), 76) << t.err();
  EXPECT_EQ(slurp(marker), "") << "the command got SIGTERM and ran on after its lease could have run out";
  EXPECT_NE(t.err().find("SIGKILL"), std::string::npos) << t.err();
  EXPECT_TRUE(other.still_held()) << "the tool must not release the new holder's lock";
}

TEST_F(cli_test, LostLeaseKillAfterAndIgnore) {
  {  // a command that ignores SIGTERM gets SIGKILL after --kill-after
    tool t({"run", "--lease", "1s", "--kill-after", "200ms", "job", "--", "sh", "-c",
            "trap '' TERM; echo ready; while :; do sleep 0.02; done"},
           url());
    ASSERT_EQ(t.line(), "ready");
    admin->command({"SET", "redislock:{job}", "someone-else"});  // taken from under it
    EXPECT_EQ(t.wait(), 76) << t.err();
    admin->command({"DEL", "redislock:{job}"});
  }
  {  // --on-lost ignore: only the message; the command runs on and its status is the tool's
    const std::string go = temp_file("ignore");
    tool t({"run", "--lease", "600ms", "--on-lost", "ignore", "job", "--", "sh", "-c",
            "echo ready; while [ ! -e " + go + " ]; do sleep 0.02; done; exit 6"},
           url());
    ASSERT_EQ(t.line(), "ready");
    admin->command({"SET", "redislock:{job}", "someone-else"});
    EXPECT_NE(t.err_line().find("lost the lock 'job'"), std::string::npos);
    std::ofstream(go) << "go\n";  // the command was still running: it ends only now
    EXPECT_EQ(t.wait(), 6) << t.err();
    EXPECT_EQ(get("redislock:{job}"), "someone-else") << "the new holder's lock is left alone";
  }
}

// redislock killed: its COMMAND dies with it (it must not run on unprotected), and the lock
// stays taken until its lease runs out; then the next run gets it.
TEST_F(cli_test, KilledToolTakesItsCommandAlongAndTheLeaseRunsOut) {
  const std::string pid_file = temp_file("pid");
  tool t({"run", "--lease", "800ms", "job", "--", "sh", "-c",
          "echo $$ > " + pid_file + "; echo ready; while :; do sleep 0.02; done"},
         url());
  ASSERT_EQ(t.line(), "ready");
  const pid_t command = pid_in(pid_file);
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, command, 0));
  ASSERT_GE(pidfd, 0);
  t.signal(SIGKILL);
  EXPECT_EQ(t.wait(), 128 + SIGKILL);
  pollfd p{pidfd, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, static_cast<int>(bound.count())), 1) << "the command outlived redislock";
  ::close(pidfd);
  EXPECT_TRUE(exists("redislock:{job}")) << "not released: the lease runs out by itself";
  const result next = run({"run", "--wait", "20s", "job", "--", "echo", "next"});
  EXPECT_EQ(next.status, 0) << next.err;
  EXPECT_EQ(next.out, "next\n");
}

// True while `pid` exists and is not a zombie (a killed process that is not yet reaped no
// longer runs).
bool running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return false;
  const auto paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] != 'Z' && text[paren + 2] != 'X';
}

// The state letter of `pid` in /proc (R, S, T stopped, Z, ...), '?' when it is gone.
char state_of(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return '?';
  const auto paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() ? text[paren + 2] : '?';
}

// The first child of `pid`'s main thread (the tool's keeper process), 0 when none.
pid_t first_child_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  pid_t child = 0;
  return in >> child ? child : 0;
}

// How many descriptors `pid` has open (-1 when it is gone).
int open_descriptors(pid_t pid) {
  DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (d == nullptr) return -1;
  int n = 0;
  while (const dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') ++n;
  ::closedir(d);
  return n;
}

// A shell command that prints, for each pid, "dead" or "running" (as `running` above).
std::string report_states(const std::vector<pid_t>& pids) {
  std::string list;
  for (const pid_t p : pids) list += " " + std::to_string(p);
  return "for p in" + list +
         "; do s=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -c1); "
         "case \"$s\" in ''|Z|X) echo dead;; *) echo running;; esac; done";
}

// Renewals stop being confirmed (the server is reached through a proxy that goes silent):
// the command, which ignores SIGTERM, with a child that does too and one that left for a
// session of its own, is dead before its lease can run out, so before a second run, queued
// on the server itself, starts its command.
TEST_F(cli_test, UnconfirmedRenewalsStopTheCommandBeforeTheLeaseCanRunOut) {
  redislock_test::tcp_proxy proxy(server->port());
  const std::string pids = temp_file("silent_pids");
  tool first({"run", "--lease", "2s", "--kill-after", "500ms", "job", "--", "sh", "-c",
              "trap '' TERM; sleep 30 & c=$!; setsid sleep 30 & echo $$ $c $! > " + pids + "; echo ready; wait; wait"},
             proxy.uri());
  ASSERT_EQ(first.line(), "ready");
  pid_t shell = 0, child = 0, away = 0;
  {
    std::ifstream in(pids);
    ASSERT_TRUE(in >> shell >> child >> away) << slurp(pids);
  }
  proxy.set_stalled(true);  // nothing more reaches the server, nothing comes back
  // The second run's command reports, as it starts, whether any of the first's processes runs.
  tool second({"run", "--wait", "20s", "job", "--", "sh", "-c", report_states({shell, child, away})}, url());
  EXPECT_EQ(second.wait(), 0) << second.err();
  EXPECT_EQ(second.out(), "dead\ndead\ndead\n") << "the first run's command still ran when the second one's started";
  EXPECT_EQ(first.wait(), 76) << first.err();
  EXPECT_NE(first.err().find("SIGKILL"), std::string::npos) << first.err();
  EXPECT_FALSE(running(shell));
  EXPECT_FALSE(running(child));
  EXPECT_FALSE(running(away));
}

// The command ends on its own just as its stop comes due (renewals unconfirmed), before its
// keeper reaped it (the keeper is held stopped here to widen that moment): the command was not
// stopped, so its own status is the tool's, not 76.
TEST_F(cli_test, CommandThatEndedAsItsStopCameDueKeepsItsStatus) {
  redislock_test::tcp_proxy proxy(server->port());
  const std::string pid_file = temp_file("ended_pid"), go = temp_file("ended_go");
  tool t({"run", "--lease", "2s", "--kill-after", "500ms", "job", "--", "sh", "-c",
          "echo $$ > " + pid_file + "; echo ready; while [ ! -e " + go + " ]; do sleep 0.02; done; exit 3"},
         proxy.uri());
  ASSERT_EQ(t.line(), "ready");
  const pid_t command = pid_in(pid_file);
  const pid_t keeper = first_child_of(t.pid());
  ASSERT_GT(keeper, 0);
  // Stopped only once it kept just its kill switch and its SIGCHLD descriptor: it has closed its
  // end of the start-up report then, which the tool reads to its end before it supervises
  // (stopped earlier, the tool would wait for that end, supervising nothing, until SIGCONT).
  ASSERT_TRUE(redislock_test::eventually([&] { return open_descriptors(keeper) == 2; }, bound))
      << open_descriptors(keeper) << " descriptors open";
  ASSERT_EQ(::kill(keeper, SIGSTOP), 0);
  const std::shared_ptr<void> resume(nullptr, [keeper](void*) { ::kill(keeper, SIGCONT); });
  ASSERT_TRUE(redislock_test::eventually([&] { return state_of(keeper) == 'T'; }, bound));
  std::ofstream(go) << "go\n";
  ASSERT_TRUE(redislock_test::eventually([&] { return state_of(command) == 'Z'; }, bound));
  proxy.set_stalled(true);  // renewals go unconfirmed: the stop comes due in 1.3 s
  const std::string said = t.err_line();
  EXPECT_NE(said.find("not confirmed"), std::string::npos) << "[" << said << "]";
  ::kill(keeper, SIGCONT);
  EXPECT_EQ(t.wait(), 3) << t.err();
}

TEST_F(cli_test, KillAfterThatLeavesNoTimeBeforeTheLeaseEndsIsRefused) {
  const long long before = connections();
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"run", "--lease", "2s", "--kill-after", "2s", "job", "--", "true"},
           {"run", "--lease", "2s", "--kill-after", "900ms", "job", "--", "true"},
           {"run", "--lease", "300ms", "job", "--", "true"},
           {"run", "--lease", "300ms", "--on-lost", "kill", "job", "--", "true"},
           // the margin grows with the lease (200 ms + 0.1 %: 300 ms for 100 s)
           {"run", "--lease", "100s", "--kill-after", "49800ms", "job", "--", "true"},
       }) {
    const result r = run(args);
    EXPECT_EQ(r.status, 2) << args[2] << " " << args[4] << ": " << r.err;
    EXPECT_NE(r.err.find("lease"), std::string::npos) << r.err;
  }
  EXPECT_EQ(connections(), before) << "refused before any connection";
  EXPECT_EQ(run({"run", "--lease", "2s", "--kill-after", "798ms", "job", "--", "true"}).status, 0);
  EXPECT_EQ(run({"run", "--lease", "100s", "--kill-after", "49700ms", "job", "--", "true"}).status, 0);
  EXPECT_EQ(run({"run", "--lease", "300ms", "--on-lost", "ignore", "job", "--", "true"}).status, 0);
  EXPECT_EQ(run({"run", "--lease", "5s", "job", "--", "true"}).status, 0) << "the default --kill-after fits";
}

// The lock stays held until every process the command started has exited, not only the
// command itself (as flock(1) holds while any process keeps its descriptor).
TEST_F(cli_test, LockIsHeldUntilTheLastProcessOfTheCommandExits) {
  const std::string pids = temp_file("worker_pids"), stop = temp_file("worker_stop");
  const std::string worker = "i=0; while [ ! -e " + stop + " ] && [ $i -lt 1000 ]; do sleep 0.02; i=$((i+1)); done";
  tool first({"run", "--lease", "1s", "job", "--", "sh", "-c",
              "(" + worker + ") & b=$!; setsid sh -c '" + worker + "' & echo $$ $b $! > " + pids + "; exit 0"},
             url());
  pid_t leader = 0, background = 0, away = 0;  // away: in a session of its own
  ASSERT_TRUE(redislock_test::eventually(
      [&] {
        std::ifstream in(pids);
        return static_cast<bool>(in >> leader >> background >> away);
      },
      bound));
  // The command itself has ended (and was reaped) while its background process runs on.
  ASSERT_TRUE(redislock_test::eventually([&] { return ::kill(leader, 0) != 0 && errno == ESRCH; }, bound));
  ASSERT_TRUE(running(background));
  ASSERT_TRUE(running(away));
  EXPECT_EQ(first.wait(1500ms), -1) << "the run ended while a process of its command ran: " << first.err();
  EXPECT_EQ(run({"status", "job"}).status, 0) << "held while the background process runs";
  EXPECT_EQ(run({"run", "--no-wait", "job", "--", "true"}).status, 75);
  std::ofstream(stop) << "stop\n";
  EXPECT_EQ(first.wait(), 0) << first.err();
  EXPECT_FALSE(running(background));
  EXPECT_FALSE(running(away));
  EXPECT_EQ(run({"status", "job"}).status, 1) << "released once the last process exited";
}

// Only the keeper (a fork of redislock, also named redislock) is killed with SIGKILL: the
// tool kills and reaps every process COMMAND started, the one in a session of its own
// included, before it releases the lock; a second run, queued on the server, finds none
// running as its command starts.
TEST_F(cli_test, KilledKeeperLeavesNoProcessOfTheCommandRunningOnceTheLockIsFree) {
  const std::string pids = temp_file("keeper_pids");
  tool first({"run", "--lease", "1s", "job", "--", "sh", "-c",
              "setsid sleep 41 & echo $! > " + pids + "; echo ready; sleep 42"},
             url());
  ASSERT_EQ(first.line(), "ready");
  const pid_t away = pid_in(pids);
  const pid_t keeper = first_child_of(first.pid());
  ASSERT_GT(keeper, 0);
  tool second({"run", "--wait", "20s", "job", "--", "sh", "-c", report_states({away})}, url());
  ASSERT_TRUE(redislock_test::eventually(
      [&] {
        return admin->command({"ZCARD", "redislock:{job}:queue"})->integer == 1;
      },
      bound));
  ASSERT_EQ(::kill(keeper, SIGKILL), 0);
  EXPECT_EQ(second.wait(), 0) << second.err();
  EXPECT_EQ(second.out(), "dead\n") << "the lock was free while a process of the first run's command ran";
  EXPECT_EQ(first.wait(), 128 + SIGKILL) << first.err();
  EXPECT_FALSE(running(away));
  if (running(away)) ::kill(away, SIGKILL);
}

// Ctrl-Z (SIGTSTP), SIGTTIN and SIGTTOU sent to the tool suspend COMMAND (SIGSTOP to its
// process group) while the tool runs on and keeps renewing the lease; SIGCONT resumes COMMAND.
TEST_F(cli_test, SuspendingTheToolSuspendsTheCommandAndTheLeaseIsStillRenewed) {
  const std::string pid_file = temp_file("suspend_pid");
  // One process that forks nothing: a shell waiting for a vfork()ed child stopped before its
  // exec shows as D, not T.
  // A lease that leaves a loaded machine's renewals time (SIGTERM comes when half of it went
  // unconfirmed); the check waits for one renewal each time.
  tool t({"run", "--lease", "3s", "job", "--", "sh", "-c", "echo $$ > " + pid_file + "; echo ready; exec sleep 30"},
         url());
  ASSERT_EQ(t.line(), "ready");
  const pid_t command = pid_in(pid_file);
  // The key's expiry on the server's clock, in ms (-1: no key); PEXPIRETIME needs Redis 7.
  auto lease_end = [&] {
    return admin
        ->command(
            {"EVAL",
             "local ttl = redis.call('PTTL', KEYS[1]) if ttl < 0 then return -1 end "
             "local t = redis.call('TIME') return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + ttl",
             "1", "redislock:{job}"})
        ->integer;
  };
  for (const int sig : {SIGTSTP, SIGTTIN, SIGTTOU}) {
    t.signal(sig);
    ASSERT_TRUE(redislock_test::eventually([&] { return state_of(command) == 'T'; }, 5s))
        << "signal " << sig << ": the command was not suspended (state " << state_of(command)
        << "); the tool: " << t.wait(0ms) << " " << t.err();
    EXPECT_NE(state_of(t.pid()), 'T') << "signal " << sig << ": the tool stopped itself";
    const long long suspended_at = lease_end();
    ASSERT_GT(suspended_at, 0);
    EXPECT_TRUE(redislock_test::eventually([&] { return lease_end() > suspended_at; }, 5s))
        << "signal " << sig << ": the lease was not renewed while the command was suspended";
    t.signal(SIGCONT);
    ASSERT_TRUE(redislock_test::eventually([&] { return state_of(command) != 'T'; }, 5s))
        << "signal " << sig << ": SIGCONT did not resume the command";
  }
  t.signal(SIGTERM);
  EXPECT_EQ(t.wait(), 128 + SIGTERM) << t.err();
  EXPECT_FALSE(exists("redislock:{job}"));
}

// A command given a file capability loses PR_SET_PDEATHSIG at its execve; it must still not
// outlive a redislock killed with SIGKILL (it would run on without the lock).
TEST_F(cli_test, KilledToolTakesACommandWithFileCapabilitiesAlong) {
  const std::string capsleep = temp_file("capsleep"), pid_file = temp_file("cap_pid");
  std::vector<std::string> wrapper;
  if (::geteuid() == 0) {  // root keeps its death signal through file capabilities: run as nobody
    if (::access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "running as root without setpriv";
    wrapper = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"};
  }
  // Only the tool's user may run the copy (chown before setcap: chown clears capabilities).
  const std::string copy = "cp /bin/sleep " + capsleep + (wrapper.empty() ? "" : " && chown 65534:65534 " + capsleep) +
                           " && chmod 700 " + capsleep + " && setcap cap_net_bind_service+ep " + capsleep + " 2>&1";
  if (std::system(copy.c_str()) != 0) {
    std::remove(capsleep.c_str());
    GTEST_SKIP() << "setcap is unavailable here (package libcap2-bin, CAP_SETFCAP)";
  }
  tool t({"run", "--lease", "800ms", "job", "--", "sh", "-c",
          "echo $$ > " + pid_file + "; echo ready; exec " + capsleep + " 30"},
         url(), "/dev/null", wrapper);
  ASSERT_EQ(t.line(), "ready") << t.err();
  const pid_t command = pid_in(pid_file);
  const std::string exe = "/proc/" + std::to_string(command) + "/exe";
  ASSERT_TRUE(redislock_test::eventually(
      [&] {
        char buf[4096];
        const ssize_t n = ::readlink(exe.c_str(), buf, sizeof buf);
        return n > 0 && std::string(buf, static_cast<std::size_t>(n)) == capsleep;
      },
      bound))
      << "the command never ran the binary with the capability";
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, command, 0));
  ASSERT_GE(pidfd, 0);
  t.signal(SIGKILL);
  EXPECT_EQ(t.wait(), 128 + SIGKILL);
  pollfd p{pidfd, POLLIN, 0};
  const bool ended = ::poll(&p, 1, 10000) == 1;
  EXPECT_TRUE(ended) << "the command with a file capability outlived redislock";
  if (!ended) ::kill(command, SIGKILL);
  ::close(pidfd);
  std::remove(capsleep.c_str());
}

TEST_F(cli_test, StatusBeforeDuringAndAfterAHold) {
  result before = run({"status", "--json", "job"});
  EXPECT_EQ(before.status, 1);
  EXPECT_EQ(json_field(before.out, "held"), "false");
  EXPECT_EQ(json_field(before.out, "kind"), "\"none\"");
  EXPECT_EQ(json_field(before.out, "name"), "\"job\"");

  EXPECT_EQ(run({"run", "job", "--", "true"}).status, 0);  // draws the first token
  const std::uint64_t first_token = std::stoull(get("redislock:{job}:fence"));
  auto args = ready_loop();
  args.insert(args.begin(), {"run", "job", "--"});
  tool holder(args, url());
  ASSERT_EQ(holder.line(), "ready");
  const result during = run({"status", "--json", "job"});
  EXPECT_EQ(during.status, 0);
  EXPECT_EQ(json_field(during.out, "held"), "true");
  EXPECT_EQ(json_field(during.out, "kind"), "\"mutex\"");
  const std::string holders_token = json_field(during.out, "last_fencing_token");
  EXPECT_GT(std::stoull(holders_token), first_token) << "the hold drew a new token";
  EXPECT_EQ(json_field(during.out, "waiters"), "0");
  EXPECT_EQ(json_field(during.out, "role"), "\"holder\"");
  const std::string owner = json_field(during.out, "owner"), object = json_field(during.out, "object");
  EXPECT_EQ("\"" + get("redislock:{job}") + "\"", owner);
  EXPECT_EQ(owner.rfind(object.substr(0, object.size() - 1), 0), 0u) << owner << " " << object;
  EXPECT_GT(std::stoll(json_field(during.out, "remaining_ms")), 0);
  EXPECT_EQ(run({"status", "--prefix", "elsewhere:", "job"}).status, 1) << "another prefix, another lock";
  const result text = run({"status", "job"});
  EXPECT_EQ(text.status, 0);
  EXPECT_EQ(text.out.rfind("job: held (mutex)\n", 0), 0u) << text.out;

  holder.signal(SIGTERM);
  EXPECT_EQ(holder.wait(), 128 + SIGTERM);
  const result after = run({"status", "--json", "job", "other"});
  EXPECT_EQ(after.status, 1);
  EXPECT_EQ(json_field(after.out, "held"), "false");
  EXPECT_EQ(json_field(after.out, "last_fencing_token"), holders_token);
  EXPECT_EQ(json_field(after.out, "name", after.out.find("},{")), "\"other\"") << after.out;
}

TEST_F(cli_test, InspectReadsEveryKindWithoutWriting) {
  redislock::reentrant_mutex r(*pool, "re");
  r.lock();
  r.lock();
  redislock::shared_mutex s(*pool, "sh");
  s.lock_shared();
  s.lock_shared();
  redislock::mutex m(*pool, "mx");
  m.lock();

  const redislock::lock_info ri = redislock::inspect(*pool, "re");
  EXPECT_EQ(ri.kind, redislock::lock_kind::reentrant);
  ASSERT_EQ(ri.holders.size(), 1u);
  EXPECT_EQ(ri.holders[0].count, 2);
  EXPECT_EQ(ri.last_fence, 0u);  // nobody asked for a token: no counter
  EXPECT_EQ(ri.waiters, 0);      // its queue (P{N}:rqueue) is empty
  const redislock::lock_info si = redislock::inspect(*pool, "sh");
  EXPECT_EQ(si.kind, redislock::lock_kind::shared);
  ASSERT_EQ(si.holders.size(), 1u);
  EXPECT_EQ(si.holders[0].role, "reader");
  EXPECT_EQ(si.holders[0].owner, s.owner_id());
  EXPECT_EQ(si.holders[0].count, 2);
  EXPECT_EQ(si.waiters, 0);  // the shared kind queues its waiters on the server
  const redislock::lock_info mi = redislock::inspect(*pool, "mx");
  EXPECT_EQ(mi.kind, redislock::lock_kind::mutex);
  ASSERT_EQ(mi.holders.size(), 1u);
  EXPECT_EQ(mi.holders[0].owner, get("redislock:{mx}"));
  admin->command({"RPUSH", "redislock:{list}", "x"});
  const redislock::lock_info li = redislock::inspect(*pool, "list");
  EXPECT_EQ(li.kind, redislock::lock_kind::foreign);
  EXPECT_EQ(li.foreign_type, "list");
  EXPECT_FALSE(li.held());

  // EVALSHA_RO refuses a script that writes: every info script runs under it (Redis 7 has it).
  if (redislock_test::server_version(*admin) < 70000) return;
  namespace scripts = redislock::detail::lock_info_scripts;
  for (const redislock::script* sc : {&scripts::mutex_info(), &scripts::reentrant_info(), &scripts::shared_info()}) {
    sc->load(*admin);
    for (const char* name : {"re", "sh", "mx", "list", "free"}) {
      const std::string key = std::string("redislock:{") + name + "}";
      auto reply = admin->command(
          {"EVALSHA_RO", sc->sha1(), "4", key, key + ":fence", key + ":queue", key + ":waiters", key + ":released"});
      EXPECT_NE(reply->type, REDIS_REPLY_ERROR) << name << ": " << std::string(reply->str, reply->len);
    }
  }
}

// A name whose lock key is gone while waiters are queued (the holder's key expired, was evicted
// or deleted) reports the waiters of every kind, each kind in its own queue: not only the
// mutex's (reentrant and shared waiters were reported as 0).
TEST_F(cli_test, InspectOfAFreeNameCountsTheWaitersOfEveryKind) {
  redislock::reentrant_mutex r(*pool, "re-free");
  r.lock();
  // The waiters look again only at their deadline (5 s), not each second: the free lock
  // waits for the inspection below instead of going to the first waiter that looks.
  redislock::lock_options slow;
  slow.recheck_interval = 30s;
  redislock::client r_waiter_client(options());
  redislock::reentrant_mutex r_waiter(r_waiter_client, "re-free", slow);
  auto r_waited = std::async(std::launch::async, [&] { return r_waiter.try_lock_for(5s); });
  redislock::shared_mutex reader(*pool, "sh-free");
  reader.lock_shared();
  redislock::client writer_client(options());
  redislock::shared_mutex writer(writer_client, "sh-free", slow);
  auto w_waited = std::async(std::launch::async, [&] { return writer.try_lock_for(5s); });
  ASSERT_TRUE(redislock_test::eventually(
      [&] {
        return admin->command({"ZCARD", "redislock:{re-free}:rqueue"})->integer == 1 &&
               admin->command({"ZCARD", "redislock:{sh-free}:squeue"})->integer == 1;
      },
      bound));
  admin->command({"DEL", "redislock:{re-free}", "redislock:{sh-free}"});

  const redislock::lock_info ri = redislock::inspect(*pool, "re-free");
  EXPECT_EQ(ri.kind, redislock::lock_kind::none);
  EXPECT_FALSE(ri.held());
  EXPECT_EQ(ri.waiters, 1);
  const redislock::lock_info si = redislock::inspect(*pool, "sh-free");
  EXPECT_EQ(si.kind, redislock::lock_kind::none);
  EXPECT_EQ(si.waiters, 1);
  EXPECT_GT(si.writer_waiting.count(), 0);
  const result text = run({"status", "--json", "re-free"});
  EXPECT_EQ(json_field(text.out, "waiters"), "1") << text.out;

  // At their deadline the waiters find the lock free and take it, or give up: either way, done.
  ASSERT_EQ(r_waited.wait_for(bound), std::future_status::ready);
  ASSERT_EQ(w_waited.wait_for(bound), std::future_status::ready);
  EXPECT_EQ(r.unlock_and_report(), redislock::release_status::lease_expired);
  EXPECT_EQ(reader.unlock_shared_and_report(), redislock::release_status::lease_expired);
}

// A latch is never held: status shows its count, its initial count and its lease left (exit
// status 1: not held), and break leaves it alone.
TEST_F(cli_test, StatusShowsALatchAndBreakLeavesItAlone) {
  redislock::latch l(*pool, "gate", 3);
  l.count_down();
  const redislock::lock_info i = redislock::inspect(*pool, "gate");
  EXPECT_EQ(i.kind, redislock::lock_kind::latch);
  EXPECT_FALSE(i.held());
  EXPECT_EQ(i.latch_count, 2);
  EXPECT_EQ(i.latch_initial, 3);
  EXPECT_GT(i.key_ttl.count(), 0);
  EXPECT_EQ(i.waiters, 0);
  const result text = run({"status", "gate"});
  EXPECT_EQ(text.status, 1);
  EXPECT_EQ(text.out.rfind("gate: latch, 2 of 3 left to count down (created with 3), lease ", 0), 0u) << text.out;
  const result as_json = run({"status", "--json", "gate"});
  EXPECT_EQ(json_field(as_json.out, "kind"), "\"latch\"");
  EXPECT_EQ(json_field(as_json.out, "latch_count"), "2");
  EXPECT_EQ(json_field(as_json.out, "latch_initial"), "3");
  EXPECT_EQ(run({"break", "--yes", "gate"}).status, 1);
  EXPECT_EQ(l.count(), 2);
  l.count_down(2);
  EXPECT_EQ(run({"status", "gate"}).out.rfind("gate: latch, open (created with 3)", 0), 0u);
  EXPECT_EQ(json_field(run({"status", "--json", "gate"}).out, "latch_round"), "1");
  // Started again: status names the round and the count it started with.
  ASSERT_TRUE(l.try_set_count(5));
  EXPECT_EQ(
      run({"status", "gate"}).out.rfind("gate: latch, 5 of 5 left to count down (round 2, started with 5), lease ", 0),
      0u);
  EXPECT_EQ(json_field(run({"status", "--json", "gate"}).out, "latch_round"), "2");
  EXPECT_EQ(redislock::inspect(*pool, "gate").latch_round, 2);
}

// status --watch: a refreshed view, --count refreshes for scripts, or until Ctrl-C.
TEST_F(cli_test, StatusWatchRefreshesAndEndsAfterCountOrOnCtrlC) {
  redislock::mutex holder(*pool, "job");
  holder.lock();
  const result r = run({"status", "--watch", "--count", "3", "--interval", "100ms", "job"});
  EXPECT_EQ(r.status, 0) << r.err;
  std::size_t refreshes = 0;
  for (std::size_t at = r.out.find("--- "); at != std::string::npos; at = r.out.find("--- ", at + 1)) ++refreshes;
  EXPECT_EQ(refreshes, 3u) << r.out;
  EXPECT_NE(r.out.find("(refresh 3, every 0.1 s; Ctrl-C ends) ---\njob: held (mutex)\n  holder "), std::string::npos)
      << r.out;
  holder.unlock();
  tool t({"status", "--watch", "--interval", "1h", "job"}, url());
  EXPECT_EQ(t.line().rfind("--- ", 0), 0u);
  EXPECT_EQ(t.line(), "job: free");
  t.signal(SIGINT);  // ends the hour's pause at once
  EXPECT_EQ(t.wait(5s), 0) << t.err();
}

// top: the busiest names under a prefix (most waiters first), found with SCAN (never KEYS),
// and a scan that stops at --max-keys says it is partial.
TEST_F(cli_test, TopListsTheBusiestNamesUnderAPrefixWithBoundedScans) {
  for (int i = 0; i < 50; ++i) admin->command({"SET", "unrelated:" + std::to_string(i), "x"});
  redislock::mutex one(*pool, "order:1"), two(*pool, "order:2"), other(*pool, "invoice:1");
  redislock::shared_mutex three(*pool, "order:3");
  one.lock();
  two.lock();
  other.lock();
  three.lock_shared();
  std::thread waiter([&] {
    redislock::mutex w(*pool, "order:1");
    if (w.try_lock_for(20s)) w.unlock();
  });
  ASSERT_TRUE(redislock_test::eventually(
      [&] {
        return admin->command({"ZCARD", "redislock:{order:1}:queue"})->integer == 1;
      },
      bound));
  const long long keys_before = redislock_test::command_calls(*admin, "keys");
  const result r = run({"top", "order:"});
  one.unlock();
  waiter.join();
  EXPECT_EQ(r.status, 0) << r.err;
  std::vector<std::string> lines;
  for (std::size_t at = 0, nl; (nl = r.out.find('\n', at)) != std::string::npos; at = nl + 1)
    lines.push_back(r.out.substr(at, nl - at));
  ASSERT_EQ(lines.size(), 5u) << r.out;
  EXPECT_EQ(lines[0].rfind("NAME", 0), 0u);
  EXPECT_EQ(lines[1].rfind("order:1 ", 0), 0u) << "the one with a waiter first:\n" << r.out;
  EXPECT_NE(lines[1].find(" mutex "), std::string::npos);
  EXPECT_NE(lines[1].find(" s left"), std::string::npos);
  EXPECT_EQ(lines[2].rfind("order:2 ", 0), 0u) << r.out;
  EXPECT_EQ(lines[3].rfind("order:3 ", 0), 0u) << r.out;
  EXPECT_NE(lines[3].find(" shared "), std::string::npos);
  EXPECT_EQ(lines[4].rfind("3 busy of 3 names; ", 0), 0u) << r.out;
  EXPECT_NE(lines[4].find("on 1 node (complete)"), std::string::npos) << r.out;
  EXPECT_EQ(redislock_test::command_calls(*admin, "keys"), keys_before) << "never KEYS";
  EXPECT_GT(redislock_test::command_calls(*admin, "scan"), 0);

  const result partial = run({"top", "--scan-count", "1", "--max-keys", "2"});
  EXPECT_EQ(partial.status, 0) << partial.err;
  EXPECT_NE(partial.out.find(" keys examined on 1 node (stopped at --max-keys: partial)"), std::string::npos)
      << partial.out;
  const result watched = run({"top", "--watch", "--count", "2", "--interval", "100ms", "invoice:"});
  EXPECT_EQ(watched.status, 0) << watched.err;
  EXPECT_NE(watched.out.find("(refresh 2, every 0.1 s; Ctrl-C ends) ---\nNAME"), std::string::npos) << watched.out;
  EXPECT_NE(watched.out.find("\ninvoice:1 "), std::string::npos) << watched.out;
  two.unlock();
  other.unlock();
  three.unlock_shared();
}

TEST_F(cli_test, BreakHandsAMutexToItsWaiterAndStopsTheRun) {
  auto args = ready_loop();
  args.insert(args.begin(), {"run", "--lease", "900ms", "job", "--"});
  tool holder(args, url());
  ASSERT_EQ(holder.line(), "ready");
  redislock::mutex waiter(*pool, "job");
  auto waited = std::async(std::launch::async, [&] { return waiter.try_lock_for(60s); });
  ASSERT_TRUE(redislock_test::eventually(
      [&] {
        return admin->command({"ZCARD", "redislock:{job}:queue"})->integer == 1;
      },
      bound));
  const std::string removed_token = get("redislock:{job}");

  const result b = run({"break", "--yes", "job"});
  EXPECT_EQ(b.status, 0) << b.err;
  EXPECT_NE(b.out.find(removed_token), std::string::npos) << b.out;
  EXPECT_NE(b.out.find("handed to the longest waiting live waiter"), std::string::npos) << b.out;
  ASSERT_EQ(waited.wait_for(bound), std::future_status::ready);
  EXPECT_TRUE(waited.get()) << "the waiter got the lock from the break, not by timing out";
  EXPECT_EQ(holder.wait(), 76) << holder.err();
  EXPECT_TRUE(waiter.still_held());
  EXPECT_EQ(run({"status", "job"}).status, 0);
  waiter.unlock();
  const result nothing = run({"break", "--yes", "job"});
  EXPECT_EQ(nothing.status, 1);
  EXPECT_NE(nothing.err.find("nothing removed"), std::string::npos);
}

TEST_F(cli_test, BreakOnATerminalWantsYes) {
  redislock::mutex m(*pool, "job");
  m.lock();
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(master, 0);
  ASSERT_EQ(::grantpt(master), 0);
  ASSERT_EQ(::unlockpt(master), 0);
  const std::string terminal = ::ptsname(master);
  {
    tool t({"break", "job"}, url(), terminal);
    EXPECT_EQ(t.wait(), 2);
    EXPECT_NE(t.err().find("--yes"), std::string::npos) << t.err();
  }
  EXPECT_TRUE(m.still_held()) << "refused: nothing removed";
  {
    tool t({"break", "--yes", "job"}, url(), terminal);
    EXPECT_EQ(t.wait(), 0) << t.err();
  }
  EXPECT_FALSE(m.still_held());
  ::close(master);
}

TEST_F(cli_test, BreakWakesTheWaitersOfHashKinds) {
  redislock::shared_mutex reader(*pool, "sh");
  reader.lock_shared();
  redislock::client other(options());
  redislock::shared_mutex writer(other, "sh");
  auto waited = std::async(std::launch::async, [&] { return writer.try_lock_for(60s); });
  // The writer waits once it is queued.
  ASSERT_TRUE(redislock_test::eventually(
      [&] {
        return admin->command({"ZCARD", "redislock:{sh}:squeue"})->integer == 1;
      },
      bound));
  const redislock::lock_info queued = redislock::inspect(*pool, "sh");
  EXPECT_EQ(queued.waiters, 1);
  EXPECT_GT(queued.writer_waiting.count(), 0);
  const result b = run({"break", "--yes", "sh"});
  EXPECT_EQ(b.status, 0) << b.err;
  EXPECT_NE(b.out.find(reader.owner_id()), std::string::npos) << b.out;
  EXPECT_NE(b.out.find("handed to the head of its queue"), std::string::npos) << b.out;
  ASSERT_EQ(waited.wait_for(bound), std::future_status::ready) << "the writer was not woken";
  EXPECT_TRUE(waited.get());
  writer.unlock();
  EXPECT_EQ(reader.unlock_shared_and_report(), redislock::release_status::lease_expired);

  // A reentrant lock goes to its longest waiting live waiter, as its last release would.
  redislock::reentrant_mutex r(*pool, "re");
  r.lock();
  redislock::client waiter_client(options());
  redislock::reentrant_mutex r_waiter(waiter_client, "re");
  auto r_waited = std::async(std::launch::async, [&] {
    const bool got = r_waiter.try_lock_for(60s);
    const std::string owner = got ? r_waiter.owner_id() : "";
    return owner;
  });
  ASSERT_TRUE(redislock_test::eventually(
      [&] {
        return admin->command({"ZCARD", "redislock:{re}:rqueue"})->integer == 1;
      },
      bound));
  EXPECT_EQ(redislock::inspect(*pool, "re").waiters, 1);
  const result rb = run({"break", "--yes", "re"});
  EXPECT_EQ(rb.status, 0) << rb.err;
  EXPECT_NE(rb.out.find("handed to the longest waiting live waiter"), std::string::npos) << rb.out;
  ASSERT_EQ(r_waited.wait_for(bound), std::future_status::ready) << "the reentrant waiter was not handed the lock";
  const std::string owner = r_waited.get();
  ASSERT_FALSE(owner.empty());
  const redislock::lock_info after = redislock::inspect(*pool, "re");
  ASSERT_EQ(after.holders.size(), 1u);
  EXPECT_EQ(after.holders[0].owner, owner);
  EXPECT_EQ(after.holders[0].count, 1);
  EXPECT_EQ(r.unlock_and_report(), redislock::release_status::lease_expired);
}

// The URL's scheme picks the topology. On a cluster each name's keys live on the master that
// owns its slot: run, status and break reach it, whichever master that is.
TEST_F(cli_test, ClusterUrlRoutesEachNameToItsMaster) {
  redislock_test::redis_cluster cluster(3, 0);
  std::vector<std::string> names;  // one name per master
  std::vector<int> ports;
  for (int i = 0; names.size() < 3 && i < 100; ++i) {
    const std::string name = "job" + std::to_string(i);
    const int port = cluster.master_of(redislock::detail::key_slot(name));
    if (std::find(ports.begin(), ports.end(), port) == ports.end()) names.push_back(name), ports.push_back(port);
  }
  ASSERT_EQ(names.size(), 3u);
  for (std::size_t i = 0; i < names.size(); ++i) {
    const result r = run({"run", names[i], "--", "sh", "-c", "echo $REDISLOCK_FENCING_TOKEN"}, cluster.uri());
    EXPECT_EQ(r.status, 0) << r.err;
    const redislock::reply_ptr fence =
        redislock_test::redis_cluster::admin(ports[i]).command({"GET", "redislock:{" + names[i] + "}:fence"});
    ASSERT_EQ(fence->type, REDIS_REPLY_STRING) << "the fencing counter lives on the master that owns the name's slot";
    EXPECT_EQ(r.out, std::string(fence->str, fence->len) + "\n") << names[i];
  }
  auto args = ready_loop();
  args.insert(args.begin(), {"run", "--lease", "900ms", names[1], "--"});
  tool holder(args, cluster.uri());
  ASSERT_EQ(holder.line(), "ready");
  const result during = run({"status", "--json", names[1]}, cluster.uri());
  EXPECT_EQ(during.status, 0) << during.err;
  EXPECT_EQ(json_field(during.out, "kind"), "\"mutex\"");
  EXPECT_EQ(run({"run", "--no-wait", names[1], "--", "true"}, cluster.uri()).status, 75);
  const result busiest = run({"top", "job"}, cluster.uri());  // SCANs every master
  EXPECT_EQ(busiest.status, 0) << busiest.err;
  EXPECT_NE(busiest.out.find("\n" + names[1] + " "), std::string::npos) << busiest.out;
  EXPECT_NE(busiest.out.find("1 busy of 3 names; "), std::string::npos) << busiest.out;
  EXPECT_NE(busiest.out.find(" on 3 nodes (complete)"), std::string::npos) << busiest.out;
  const result b = run({"break", "--yes", names[1]}, cluster.uri());
  EXPECT_EQ(b.status, 0) << b.err;
  EXPECT_EQ(holder.wait(), 76) << holder.err();
  EXPECT_EQ(run({"status", names[1]}, cluster.uri()).status, 1);
  const result bad = run({"status", "job"}, "redis-cluster://127.0.0.1:1,");
  EXPECT_EQ(bad.status, 2) << "a malformed seed list is a usage error";
}

// Through Sentinel: the tool asks the sentinels for the service's master (separate Sentinel
// credentials in the URL's query) and locks there.
TEST_F(cli_test, SentinelUrlLocksOnTheServicesMaster) {
  redislock_test::sentinel_topology topology;
  const result r = run({"run", "job", "--", "sh", "-c", "echo $REDISLOCK_FENCING_TOKEN"}, topology.uri());
  EXPECT_EQ(r.status, 0) << r.err;
  redislock::connection master(topology.node_options(topology.master()));
  const redislock::reply_ptr fence = master.command({"GET", "redislock:{job}:fence"});
  ASSERT_EQ(fence->type, REDIS_REPLY_STRING) << "the token was drawn on the master";
  EXPECT_EQ(r.out, std::string(fence->str, fence->len) + "\n");
  auto args = ready_loop();
  args.insert(args.begin(), {"run", "job", "--"});
  tool holder(args, topology.uri());
  ASSERT_EQ(holder.line(), "ready");
  EXPECT_EQ(run({"status", "job"}, topology.uri()).status, 0);
  EXPECT_EQ(run({"run", "--no-wait", "job", "--", "true"}, topology.uri()).status, 75);
  holder.signal(SIGTERM);
  EXPECT_EQ(holder.wait(), 128 + SIGTERM);
  EXPECT_EQ(run({"status", "job"}, topology.uri()).status, 1) << "released when the command ended";
  const std::string wrong_service = "redis-sentinel://:" + std::string(topology.data_password) + "@" +
                                    topology.sentinel_hosts() +
                                    "/nosuchservice?sentinel_password=" + topology.sentinel_password;
  EXPECT_EQ(run({"status", "job"}, wrong_service).status, 69) << "no master to reach";
}

}  // namespace

}  // namespace test_cli
