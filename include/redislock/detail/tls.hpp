#pragma once
/// @file detail/tls.hpp
/// @brief TLS for redislock::connection (hiredis >= 1.0 with hiredis_ssl, REDISLOCK_WITH_TLS).
///
/// hiredis 1.2's redisSSLContext verifies the server's certificate chain but not the name it
/// was issued for, so redislock makes its own SSL_CTX and SSL: the certificate must chain to a
/// trusted CA *and* name the host connected to (tls_server_name when set): DNS names by the
/// usual subjectAltName rules (no partial wildcards), IP addresses by an IP subjectAltName.
/// The SSL is handed to hiredis with redisInitiateSSL; the handshake is then completed here
/// without blocking, so one deadline (the connect timeout) bounds it whatever the peer does.

#include <redislock/errors.hpp>
#include <redislock/options.hpp>

#include <hiredis/hiredis.h>
#include <hiredis/hiredis_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

namespace redislock::detail {

struct ssl_ctx_deleter {
  void operator()(SSL_CTX* c) const noexcept { SSL_CTX_free(c); }
};
using ssl_ctx_ptr = std::unique_ptr<SSL_CTX, ssl_ctx_deleter>;

struct ssl_deleter {
  void operator()(SSL* s) const noexcept { SSL_free(s); }
};

/// The OpenSSL errors queued on this thread, as text (empties the queue).
inline std::string openssl_errors() {
  std::string out;
  for (unsigned long e; (e = ERR_get_error()) != 0;) {
    char buffer[256];
    ERR_error_string_n(e, buffer, sizeof buffer);
    if (!out.empty()) out += "; ";
    out += buffer;
  }
  return out.empty() ? "no detail from OpenSSL" : out;
}

inline bool is_ip_address(const std::string& s) noexcept {
  in_addr v4;
  in6_addr v6;
  return ::inet_pton(AF_INET, s.c_str(), &v4) == 1 || ::inet_pton(AF_INET6, s.c_str(), &v6) == 1;
}

/// A client SSL_CTX for `o`: TLS 1.2 or later, the peer verified against tls_ca_file (the
/// system's CAs when empty), the client certificate and key (mutual TLS) when given.
/// Throws invalid_argument (a certificate without its key or the reverse) or tls_error.
inline ssl_ctx_ptr make_tls_context(const connection_options& o) {
  if (o.tls_cert_file.empty() != o.tls_key_file.empty())
    throw invalid_argument("TLS: tls_cert_file and tls_key_file must be given together");
  redisInitOpenSSL();
  ERR_clear_error();
  ssl_ctx_ptr ctx(SSL_CTX_new(TLS_client_method()));
  if (!ctx) throw tls_error("TLS setup failed: " + openssl_errors());
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  if (o.tls_ca_file.empty()) {
    if (SSL_CTX_set_default_verify_paths(ctx.get()) != 1)
      throw tls_error("TLS setup failed: cannot load the system's CA certificates: " + openssl_errors());
  } else if (SSL_CTX_load_verify_locations(ctx.get(), o.tls_ca_file.c_str(), nullptr) != 1) {
    throw tls_error("TLS setup failed: cannot load CA certificates from " + o.tls_ca_file + ": " + openssl_errors());
  }
  if (!o.tls_cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx.get(), o.tls_cert_file.c_str()) != 1)
      throw tls_error("TLS setup failed: cannot load the client certificate " + o.tls_cert_file + ": " +
                      openssl_errors());
    if (SSL_CTX_use_PrivateKey_file(ctx.get(), o.tls_key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx.get()) != 1)
      throw tls_error("TLS setup failed: the client key " + o.tls_key_file +
                      " cannot be loaded or does not match the certificate: " + openssl_errors());
  }
  return ctx;
}

/// Why the handshake of `ssl` failed (SSL_get_error gave `ssl_error`), as the typed exception.
/// `io_detail` says what went wrong when it was the socket (SSL_ERROR_SYSCALL).
[[noreturn]] inline void throw_handshake_failure(SSL* ssl, int ssl_error, const std::string& io_detail,
                                                 const std::string& name, const std::string& endpoint) {
  const std::string what = "TLS handshake with " + endpoint + " failed: ";
  const long verify = SSL_get_verify_result(ssl);
  if (ssl_error == SSL_ERROR_SSL && verify != X509_V_OK) {
    ERR_clear_error();
    std::string why = what + "the server's certificate was rejected: " + X509_verify_cert_error_string(verify);
    if (verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH)
      why += " (it is not issued for \"" + name + "\"; set tls_server_name to the name it is issued for)";
    throw tls_error(why);
  }
  if (ssl_error == SSL_ERROR_SYSCALL || ssl_error == SSL_ERROR_ZERO_RETURN) {
    ERR_clear_error();
    throw connection_error(what + (io_detail.empty() ? "the server closed the connection" : io_detail));
  }
#ifdef SSL_R_UNEXPECTED_EOF_WHILE_READING
  if (ERR_GET_REASON(ERR_peek_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
    ERR_clear_error();
    throw connection_error(what + "the server closed the connection");
  }
#endif
  throw tls_error(what + openssl_errors());  // e.g. not a TLS port, no common protocol, alert from the server
}

/// A client SSL of `ctx` that accepts only a certificate issued for `name` (a DNS name, or an IP
/// address matched against an IP subjectAltName). Throws invalid_argument (no name), tls_error.
inline std::unique_ptr<SSL, ssl_deleter> new_verified_ssl(SSL_CTX* ctx, const std::string& name) {
  if (name.empty()) throw invalid_argument("TLS: no host name to verify the server's certificate against");
  ERR_clear_error();
  std::unique_ptr<SSL, ssl_deleter> ssl(SSL_new(ctx));
  if (!ssl) throw tls_error("TLS setup failed: " + openssl_errors());
  if (is_ip_address(name)) {  // verified against an IP subjectAltName; no SNI for addresses (RFC 6066)
    if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl.get()), name.c_str()) != 1)
      throw tls_error("TLS setup failed: cannot verify against address " + name + ": " + openssl_errors());
  } else {
    SSL_set_hostflags(ssl.get(), X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (SSL_set1_host(ssl.get(), name.c_str()) != 1 || SSL_set_tlsext_host_name(ssl.get(), name.c_str()) != 1)
      throw tls_error("TLS setup failed: cannot verify against name " + name + ": " + openssl_errors());
  }
  SSL_set_verify(ssl.get(), SSL_VERIFY_PEER, nullptr);
  return ssl;
}

/// The name a server's certificate must carry for `o`: tls_server_name, else the host.
inline const std::string& tls_name(const connection_options& o) noexcept {
  return o.tls_server_name.empty() ? o.host : o.tls_server_name;
}

/// Starts TLS on the connected blocking context `c` and completes the handshake before
/// `deadline` (none: no time limit). `name` is the name the server's certificate must carry.
/// On success `c` is blocking again and reads and writes through TLS. Throws timeout_error,
/// tls_error (certificate rejected, handshake refused), connection_error (peer closed, I/O),
/// invalid_argument (no name to verify). On failure `c` must be discarded.
inline void start_tls(redisContext& c, SSL_CTX* ctx, const std::string& name, const std::string& endpoint,
                      std::optional<std::chrono::steady_clock::time_point> deadline) {
  std::unique_ptr<SSL, ssl_deleter> ssl = new_verified_ssl(ctx, name);

  // Non-blocking for the handshake: hiredis then takes a started handshake as success (as for
  // its own non-blocking contexts) and owns the SSL; poll() below bounds the rest.
  const int fd = static_cast<int>(c.fd);
  const int fd_flags = ::fcntl(fd, F_GETFL);
  if (fd_flags < 0 || ::fcntl(fd, F_SETFL, fd_flags | O_NONBLOCK) < 0)
    throw connection_error("TLS handshake with " + endpoint + " failed: fcntl: " + std::strerror(errno));
  c.flags &= ~REDIS_BLOCK;
  if (redisInitiateSSL(&c, ssl.get()) != REDIS_OK) {
    // The SSL is still ours. Its first step may have read the server's whole answer already
    // (loopback) and failed as any later step can; hiredis leaves OpenSSL's error queue as it is.
    const bool ssl_failed = ERR_peek_error() != 0 || SSL_get_verify_result(ssl.get()) != X509_V_OK;
    throw_handshake_failure(ssl.get(), ssl_failed ? SSL_ERROR_SSL : SSL_ERROR_SYSCALL, c.errstr, name, endpoint);
  }
  SSL* s = ssl.release();  // freed by redisFree from now on

  for (;;) {
    ERR_clear_error();
    errno = 0;
    const int rv = SSL_do_handshake(s);
    if (rv == 1) break;
    const int saved_errno = errno;
    const int ssl_error = SSL_get_error(s, rv);
    if (ssl_error != SSL_ERROR_WANT_READ && ssl_error != SSL_ERROR_WANT_WRITE)
      throw_handshake_failure(s, ssl_error, saved_errno != 0 ? std::strerror(saved_errno) : "", name, endpoint);
    int wait_ms = -1;
    if (deadline) {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0)
        throw timeout_error("TLS handshake with " + endpoint +
                            " timed out (connect_timeout): the server did not answer");
      wait_ms = static_cast<int>(left);
    }
    pollfd p{fd, static_cast<short>(ssl_error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT), 0};
    if (::poll(&p, 1, wait_ms) < 0 && errno != EINTR)
      throw connection_error("TLS handshake with " + endpoint + " failed: poll: " + std::strerror(errno));
  }
  if (::fcntl(fd, F_SETFL, fd_flags) < 0)
    throw connection_error("TLS handshake with " + endpoint + " failed: fcntl: " + std::strerror(errno));
  c.flags |= REDIS_BLOCK;
}

}  // namespace redislock::detail
