#pragma once
// A strict checker of the Prometheus text exposition format (0.0.4) as redislock renders it:
// metric and label name syntax, label value escapes, HELP and TYPE once per family and before
// its samples, a family's samples together, counters ending in _total, histograms with
// _bucket / _sum / _count only, `le` bounds increasing, cumulative counts never decreasing, a
// +Inf bucket equal to _count, and no series twice. Returns the problems found (empty: fine).

#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace redislock_test {

namespace prometheus_detail {

inline bool name_char(char c, bool first, bool colon) {
  const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
  return alpha || (!first && c >= '0' && c <= '9');
}
inline bool valid_name(const std::string& s, bool colon) {
  if (s.empty()) return false;
  for (std::size_t i = 0; i < s.size(); ++i)
    if (!name_char(s[i], i == 0, colon)) return false;
  return true;
}
inline bool parse_value(const std::string& s, double& v) {
  if (s == "+Inf" || s == "-Inf" || s == "NaN") {
    v = s == "-Inf" ? -1e308 : 1e308;
    return true;
  }
  char* end = nullptr;
  v = std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size();
}

struct sample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
};

// Parses `name{a="x",b="y"} value`; false with `why` on a syntax error.
inline bool parse_sample(const std::string& line, sample& s, std::string& why) {
  std::size_t i = 0;
  while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
  s.name = line.substr(0, i);
  if (!valid_name(s.name, true)) return why = "bad metric name '" + s.name + "'", false;
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (i < line.size() && line[i] != '}') {
      std::size_t eq = line.find('=', i);
      if (eq == std::string::npos) return why = "label without '='", false;
      std::string key = line.substr(i, eq - i);
      if (!valid_name(key, false) || key.rfind("__", 0) == 0) return why = "bad label name '" + key + "'", false;
      i = eq + 1;
      if (i >= line.size() || line[i] != '"') return why = "unquoted label value", false;
      ++i;
      std::string value;
      for (;;) {
        if (i >= line.size()) return why = "unterminated label value", false;
        const char c = line[i++];
        if (c == '"') break;
        if (c == '\\') {
          if (i >= line.size()) return why = "dangling escape", false;
          const char e = line[i++];
          if (e == 'n') value += '\n';
          else if (e == '\\' || e == '"') value += e;
          else return why = std::string("bad escape \\") + e, false;
        } else if (c == '\n') {
          return why = "raw newline in label value", false;
        } else {
          value += c;
        }
      }
      for (const auto& [k, v] : s.labels)
        if (k == key) return why = "label '" + key + "' twice", false;
      s.labels.emplace_back(key, value);
      if (i < line.size() && line[i] == ',') ++i;
      else if (i >= line.size() || line[i] != '}') return why = "expected ',' or '}'", false;
    }
    if (i >= line.size()) return why = "unterminated label set", false;
    ++i;
  }
  if (i >= line.size() || line[i] != ' ') return why = "no value", false;
  if (!parse_value(line.substr(i + 1), s.value)) return why = "bad value '" + line.substr(i + 1) + "'", false;
  return true;
}

}  // namespace prometheus_detail

inline std::vector<std::string> check_exposition(const std::string& text) {
  using namespace prometheus_detail;
  std::vector<std::string> problems;
  auto problem = [&](std::size_t line_no, const std::string& what) {
    problems.push_back("line " + std::to_string(line_no) + ": " + what);
  };
  std::map<std::string, std::string> types;  // family -> type
  std::set<std::string> helped, closed, series;
  std::string current;  // the family whose samples are being read
  // histogram family + its labels without le -> (le bounds and counts in order, count)
  struct hist {
    std::vector<std::pair<double, double>> buckets;
    double count = -1;
    bool has_sum = false;
  };
  std::map<std::string, hist> histograms;
  if (!text.empty() && text.back() != '\n') problems.push_back("the text does not end with a newline");
  std::size_t line_no = 0, start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::size_t a = line.find(' ', 2);
      const std::string keyword = line.substr(2, a == std::string::npos ? std::string::npos : a - 2);
      if (keyword != "HELP" && keyword != "TYPE") continue;  // a comment
      if (a == std::string::npos) {
        problem(line_no, keyword + " without a metric name");
        continue;
      }
      std::size_t b = line.find(' ', a + 1);
      const std::string family = line.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1);
      const std::string rest = b == std::string::npos ? "" : line.substr(b + 1);
      if (!valid_name(family, true)) problem(line_no, "bad family name '" + family + "'");
      if (closed.count(family) != 0) problem(line_no, keyword + " for '" + family + "' after its samples");
      if (keyword == "HELP") {
        if (!helped.insert(family).second) problem(line_no, "HELP for '" + family + "' twice");
      } else {
        static const std::set<std::string> known{"counter", "gauge", "histogram", "summary", "untyped"};
        if (known.count(rest) == 0) problem(line_no, "unknown type '" + rest + "'");
        if (!types.emplace(family, rest).second) problem(line_no, "TYPE for '" + family + "' twice");
        if (rest == "counter" && (family.size() < 6 || family.substr(family.size() - 6) != "_total"))
          problem(line_no, "counter '" + family + "' does not end in _total");
      }
      if (current != family && !current.empty()) closed.insert(current);
      current = family;
      continue;
    }
    sample s;
    std::string why;
    if (!parse_sample(line, s, why)) {
      problem(line_no, why + ": " + line);
      continue;
    }
    // The family: the name itself, or a histogram's name without its suffix.
    std::string family = s.name, suffix;
    for (const char* sfx : {"_bucket", "_sum", "_count"}) {
      const std::string x(sfx);
      if (family.size() > x.size() && family.compare(family.size() - x.size(), x.size(), x) == 0 &&
          types.count(family.substr(0, family.size() - x.size())) != 0 &&
          types[family.substr(0, family.size() - x.size())] == "histogram") {
        family = family.substr(0, family.size() - x.size());
        suffix = x;
      }
    }
    if (types.count(family) == 0) {
      problem(line_no, "sample of '" + s.name + "' without a TYPE");
      continue;
    }
    if (family != current) {
      if (closed.count(family) != 0) problem(line_no, "samples of '" + family + "' are not together");
      if (!current.empty()) closed.insert(current);
      current = family;
    }
    std::string key = s.name, without_le;
    double le = 0;
    bool has_le = false;
    for (const auto& [k, v] : s.labels) {
      key += "," + k + "=" + v;
      if (k == "le") {
        has_le = parse_value(v, le);
        if (!has_le) problem(line_no, "bad le '" + v + "'");
        if (v == "+Inf") le = 1e308;
      } else {
        without_le += "," + k + "=" + v;
      }
    }
    if (!series.insert(key).second) problem(line_no, "series twice: " + line);
    const std::string& type = types[family];
    if (type == "histogram") {
      if (suffix.empty()) {
        problem(line_no, "histogram sample without _bucket/_sum/_count: " + s.name);
        continue;
      }
      hist& h = histograms[family + without_le];
      if (suffix == "_bucket") {
        if (!has_le) problem(line_no, "bucket without le");
        else h.buckets.emplace_back(le, s.value);
      } else if (suffix == "_count") {
        h.count = s.value;
      } else {
        h.has_sum = true;
      }
    } else if (s.value < 0 && type == "counter") {
      problem(line_no, "negative counter");
    }
  }
  for (const auto& [name, h] : histograms) {
    for (std::size_t i = 1; i < h.buckets.size(); ++i) {
      if (!(h.buckets[i].first > h.buckets[i - 1].first)) problems.push_back(name + ": le not increasing");
      if (h.buckets[i].second < h.buckets[i - 1].second) problems.push_back(name + ": bucket counts decrease");
    }
    if (h.buckets.empty() || h.buckets.back().first < 1e308) problems.push_back(name + ": no +Inf bucket");
    else if (h.buckets.back().second != h.count) problems.push_back(name + ": +Inf bucket != _count");
    if (!h.has_sum) problems.push_back(name + ": no _sum");
  }
  return problems;
}

}  // namespace redislock_test
