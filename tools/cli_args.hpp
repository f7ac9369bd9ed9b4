#pragma once
// Command-line parsing helpers of the redislock tool: durations ("500ms", "30s", "1.5m"),
// integers, and a small cursor over argv that reports every mistake as one usage_error.

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace redislock_cli {

/// A bad command line: main prints "redislock: <what>" and exits with code 2.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// "<number>[ms|s|m|h]", the number may have a fraction; no unit means seconds (like
/// timeout(1)). Rejects negative values, junk, and anything over 30 days.
inline std::chrono::milliseconds parse_duration(std::string_view text, std::string_view what) {
  auto bad = [&](const std::string& why) {
    return usage_error("bad " + std::string(what) + " '" + std::string(text) + "': " + why +
                       " (examples: 500ms, 30s, 5m, 1h)");
  };
  std::size_t digits = 0;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.'))
    ++digits;
  const std::string number(text.substr(0, digits));
  const std::string_view unit = text.substr(digits);
  if (number.empty() || number == "." || number.find('.') != number.rfind('.')) throw bad("not a number");
  double scale = 0;
  if (unit == "ms") {
    scale = 1;
  } else if (unit.empty() || unit == "s") {
    scale = 1000;
  } else if (unit == "m") {
    scale = 60000;
  } else if (unit == "h") {
    scale = 3600000;
  } else {
    throw bad("unknown unit '" + std::string(unit) + "'");
  }
  const double ms = std::strtod(number.c_str(), nullptr) * scale;
  if (!std::isfinite(ms) || ms > 30.0 * 24 * 3600 * 1000) throw bad("longer than 30 days");
  return std::chrono::milliseconds(static_cast<long long>(std::llround(ms)));
}

/// A decimal integer in [lo, hi].
inline int parse_int(std::string_view text, std::string_view what, int lo, int hi) {
  const std::string s(text);
  char* end = nullptr;
  const long v = s.empty() ? 0 : std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < lo || v > hi)
    throw usage_error("bad " + std::string(what) + " '" + s + "': want an integer from " + std::to_string(lo) + " to " +
                      std::to_string(hi));
  return static_cast<int>(v);
}

/// Walks a subcommand's arguments: options first ("--opt value" or "--opt=value"), then
/// operands. "--" ends the options (and, for `run`, starts the command).
class arg_cursor {
 public:
  explicit arg_cursor(std::vector<std::string> args) : args_(std::move(args)) {}

  bool done() const { return i_ >= args_.size(); }
  const std::string& peek() const { return args_[i_]; }
  std::string take() { return args_[i_++]; }
  std::vector<std::string> rest() {
    std::vector<std::string> r(args_.begin() + static_cast<std::ptrdiff_t>(i_), args_.end());
    i_ = args_.size();
    return r;
  }

  /// The next argument is an option ("-x", "--xyz"), not an operand or "--".
  bool at_option() const { return !done() && peek().size() > 1 && peek()[0] == '-' && peek() != "--"; }

  /// If the next argument is `name` (or "name=value"), consumes it and returns true.
  /// With a value wanted, `value` gets it (from "=value" or the next argument).
  bool option(std::string_view name, std::string* value = nullptr) {
    const std::string& a = peek();
    if (a == name) {
      ++i_;
      if (value != nullptr) {
        if (done()) throw usage_error("option " + std::string(name) + " needs a value");
        *value = take();
      }
      return true;
    }
    if (value != nullptr && a.size() > name.size() && a.compare(0, name.size(), name) == 0 && a[name.size()] == '=') {
      *value = a.substr(name.size() + 1);
      ++i_;
      return true;
    }
    return false;
  }

 private:
  std::vector<std::string> args_;
  std::size_t i_ = 0;
};

}  // namespace redislock_cli
