#pragma once
// Throwaway TLS certificates made by the openssl CLI in a temporary directory, removed by the
// destructor. Shared by tests/test_tls.cpp and bench/bench_mutex.cpp.
//   ca.{crt,key}        the CA that signed the three leaves below
//   other-ca.{crt,key}  a second CA that signed nothing of these
//   server.{crt,key}    subjectAltName IP:127.0.0.1, DNS:localhost
//   other.{crt,key}     subjectAltName DNS:other.example only
//   client.{crt,key}    a client certificate (mutual TLS)

#include <stdio.h>
#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace redislock_test {

/// Runs a shell command with its output discarded (in a subshell, so redirections inside
/// `command` stay its own); throws when it fails.
inline void run_quietly(const std::string& command) {
  if (std::system(("(" + command + ") > /dev/null 2>&1").c_str()) != 0) throw std::runtime_error("failed: " + command);
}

/// A shell command's standard output.
inline std::string output_of(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> p(::popen(command.c_str(), "r"), ::pclose);
  if (!p) throw std::runtime_error("popen failed: " + command);
  std::string out;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, p.get())) > 0;) out.append(buffer, n);
  return out;
}

struct tls_certificates {
  std::string dir;

  tls_certificates() {
    char tmpl[] = "/tmp/redislock-tls-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir = tmpl;
    const std::string d = "'" + dir + "'";
    for (const char* ca : {"ca", "other-ca"})
      run_quietly("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=redislock-test-" + std::string(ca) +
                  " -keyout " + d + "/" + ca + ".key -out " + d + "/" + ca + ".crt");
    const std::pair<const char*, const char*> leaves[] = {
        {"server", "IP:127.0.0.1,DNS:localhost"}, {"other", "DNS:other.example"}, {"client", "DNS:client"}};
    for (const auto& [leaf, names] : leaves) {
      const std::string l = d + "/" + leaf;
      run_quietly("openssl req -newkey rsa:2048 -nodes -subj /CN=" + std::string(leaf) + " -keyout " + l +
                  ".key -out " + l + ".csr");
      run_quietly("printf 'subjectAltName=" + std::string(names) + "\\n' > " + l + ".ext");
      run_quietly("openssl x509 -req -in " + l + ".csr -CA " + d + "/ca.crt -CAkey " + d +
                  "/ca.key -CAcreateserial -days 2 -out " + l + ".crt -extfile " + l + ".ext");
    }
  }
  ~tls_certificates() { std::system(("rm -rf '" + dir + "'").c_str()); }
  tls_certificates(const tls_certificates&) = delete;
  tls_certificates& operator=(const tls_certificates&) = delete;

  std::string file(const std::string& name) const { return dir + "/" + name; }

  /// redis-server arguments for a TLS port presenting <leaf>.crt, clients verified by ca.crt.
  std::vector<std::string> server_args(int tls_port, const std::string& leaf = "server",
                                       const char* auth_clients = "optional") const {
    return {"--tls-port",        std::to_string(tls_port), "--tls-cert-file", file(leaf + ".crt"),  "--tls-key-file",
            file(leaf + ".key"), "--tls-ca-cert-file",     file("ca.crt"),    "--tls-auth-clients", auth_clients};
  }
};

}  // namespace redislock_test
