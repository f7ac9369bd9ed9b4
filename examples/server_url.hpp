#pragma once
// The server an example uses when none is given on its command line: $REDISLOCK_URL, as the
// redislock command-line tool reads it; else $REDISLOCK_URI, the name the examples used to read
// (deprecated: a note on stderr says so); else nullptr (the example's default).
#include <cstdio>
#include <cstdlib>

inline const char* server_url_from_env() {
  if (const char* url = std::getenv("REDISLOCK_URL")) return url;
  if (const char* uri = std::getenv("REDISLOCK_URI")) {
    std::fprintf(stderr,
                 "note: REDISLOCK_URI is deprecated and will be ignored in a later version; set REDISLOCK_URL\n");
    return uri;
  }
  return nullptr;
}
