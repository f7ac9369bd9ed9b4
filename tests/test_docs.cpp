// The documentation checks: README.md and docs/*.md say only what CI runs and compiles.
//  - the README's two set-up commands are the ones .ci/run runs (it reads them from the README);
//  - every ```cpp block is a complete translation unit that compiles (-fsyntax-only);
//  - every relative link resolves to a file in the tree, and every #anchor to a heading;
//  - no development history (issue numbers, review rounds, commit hashes) in the docs;
//  - no placeholder host (example.invalid, example.com, *.example) a reader would copy;
//  - the pages that enumerate the lock kinds name every kind (the kinds are listed once, below),
//    and no page counts them wrong ("the five kinds");
//  - every path to a program of the build (build/<dir>/tests/..., bench/...) names a build
//    directory the page or scripts/ configures, and the program exists after the build.
// REDISLOCK_SOURCE_DIR, REDISLOCK_BINARY_DIR and REDISLOCK_CXX are set by CMake.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace test_docs {

namespace fs = std::filesystem;

namespace {

const fs::path source_dir = REDISLOCK_SOURCE_DIR;
const fs::path binary_dir = REDISLOCK_BINARY_DIR;

// The lock kinds, once: every page that enumerates them is checked against this list.
const std::vector<std::string> lock_kinds = {"mutex", "reentrant_mutex", "shared_mutex", "semaphore",
                                             "latch", "election",        "redlock"};

// The pages' enumerations of kinds: the text that starts one (it runs to the next heading) and
// the kinds it leaves out on purpose.
struct kind_enumeration {
  std::string file;
  std::string marker;
  std::vector<std::string> exempt;
};
const std::vector<kind_enumeration> kind_enumerations = {
    {"README.md", "| you need | use | header | example |", {}},
    {"docs/lock-kinds.md", "| kind | like | holds belong to | header |", {}},
    {"docs/observability.md", "Every lock kind reports the same events", {}},
    {"docs/observability.md", "**Labels.** Every lock metric has", {"latch"}},  // a latch is never held
    {"docs/topologies.md", "Every kind takes it as its template argument", {}},
    {"docs/waiting-and-fairness.md", "| kind | what a release hands over |", {}},
    // The contract is what held kinds promise alike: the latch is never held, Redlock has tests of its own.
    {"docs/testing.md", "What every lock kind promises alike", {"latch", "redlock"}},
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The Markdown files users read: README.md, CHANGELOG.md and everything under docs/.
std::vector<fs::path> markdown_files() {
  std::vector<fs::path> files = {source_dir / "README.md", source_dir / "CHANGELOG.md"};
  if (fs::is_directory(source_dir / "docs"))
    for (const auto& e : fs::recursive_directory_iterator(source_dir / "docs"))
      if (e.path().extension() == ".md") files.push_back(e.path());
  std::sort(files.begin() + 2, files.end());
  return files;
}

struct code_block {
  std::string language;
  int first_line;  // 1-based line of the opening fence
  std::string text;
};

std::vector<code_block> code_blocks(const std::string& markdown) {
  std::vector<code_block> blocks;
  const std::vector<std::string> lines = lines_of(markdown);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("```", 0) != 0) continue;
    code_block b{lines[i].substr(3), static_cast<int>(i + 1), ""};
    b.language.erase(std::remove_if(b.language.begin(), b.language.end(), ::isspace), b.language.end());
    for (++i; i < lines.size() && lines[i].rfind("```", 0) != 0; ++i) b.text += lines[i] + "\n";
    blocks.push_back(std::move(b));
  }
  return blocks;
}

// Markdown text with the code blocks and inline code spans blanked out (links and prose only).
std::string prose_of(const std::string& markdown) {
  std::string out;
  bool in_block = false;
  for (const std::string& line : lines_of(markdown)) {
    if (line.rfind("```", 0) == 0) {
      in_block = !in_block;
      out += "\n";
      continue;
    }
    if (in_block) {
      out += "\n";
      continue;
    }
    std::string kept;
    bool in_span = false;
    for (char c : line) {
      if (c == '`') in_span = !in_span;
      else if (!in_span) kept += c;
    }
    out += kept + "\n";
  }
  return out;
}

// GitHub's heading anchors: lower case, punctuation dropped, spaces to '-'.
std::set<std::string> anchors_of(const std::string& markdown) {
  std::set<std::string> anchors;
  bool in_block = false;
  for (const std::string& line : lines_of(markdown)) {
    if (line.rfind("```", 0) == 0) in_block = !in_block;
    if (in_block || line.empty() || line[0] != '#') continue;
    std::string title = line.substr(line.find_first_not_of('#'));
    std::string anchor;
    for (unsigned char c : title) {
      if (std::isalnum(c) || c == '-' || c == '_' || c >= 0x80) anchor += static_cast<char>(std::tolower(c));
      else if (c == ' ') anchor += '-';
    }
    while (!anchor.empty() && anchor.front() == '-') anchor.erase(0, 1);
    anchors.insert(anchor);
  }
  return anchors;
}

int run_shell(const std::string& command, std::string& output) {
  output.clear();
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) output.append(buf, n);
  const int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string in_tree(const fs::path& p) { return fs::relative(p, source_dir).string(); }

class Docs : public ::testing::TestWithParam<fs::path> {};

}  // namespace

TEST(Readme, NamesTheTwoSetUpCommandsThatCiRuns) {
  std::string out;
  ASSERT_EQ(run_shell("'" + (source_dir / "scripts/readme_commands.sh").string() + "' '" +
                          (source_dir / "README.md").string() + "'",
                      out),
            0)
      << out;
  const std::vector<std::string> commands = lines_of(out);
  ASSERT_EQ(commands.size(), 2u) << "README.md's ```sh blocks name these set-up commands:\n" << out;
  EXPECT_EQ(commands[0].rfind("scripts/demo.sh", 0), 0u) << commands[0];
  EXPECT_EQ(commands[1].rfind("scripts/test.sh", 0), 0u) << commands[1];
  for (const std::string& c : commands) {
    const std::string script = c.substr(0, c.find(' '));
    EXPECT_TRUE(fs::exists(source_dir / script)) << script;
  }
  // .ci/run takes its commands from the README, through the same script.
  EXPECT_NE(read_file(source_dir / ".ci/run").find("scripts/readme_commands.sh README.md"), std::string::npos);
}

TEST_P(Docs, EveryCppBlockCompiles) {
  const std::string markdown = read_file(GetParam());
  const fs::path dir = fs::temp_directory_path() / ("redislock-docs-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  int compiled = 0;
  for (const code_block& b : code_blocks(markdown)) {
    if (b.language != "cpp" && b.language != "c++") continue;
    const fs::path file = dir / ("block" + std::to_string(b.first_line) + ".cpp");
    std::ofstream(file) << b.text;
    std::string out;
    const std::string command = std::string("'") + REDISLOCK_CXX + "' -std=c++17 -fsyntax-only -Wall -I '" +
                                (source_dir / "include").string() + "' '" + file.string() + "'";
    EXPECT_EQ(run_shell(command, out), 0)
        << in_tree(GetParam()) << ":" << b.first_line << ": this ```cpp block does not compile on its own:\n"
        << out;
    ++compiled;
  }
  fs::remove_all(dir);
  RecordProperty("cpp_blocks", compiled);
}

TEST_P(Docs, EveryRelativeLinkResolves) {
  const fs::path& file = GetParam();
  const std::string prose = prose_of(read_file(file));
  static const std::regex link(R"(\]\(([^)\s]+)(\s+"[^"]*")?\))");
  int line_number = 1;
  for (const std::string& line : lines_of(prose)) {
    for (std::sregex_iterator it(line.begin(), line.end(), link), end; it != end; ++it) {
      const std::string target = (*it)[1];
      if (target.rfind("http://", 0) == 0 || target.rfind("https://", 0) == 0 || target.rfind("mailto:", 0) == 0)
        continue;
      const std::size_t hash = target.find('#');
      const std::string path_part = target.substr(0, hash);
      const fs::path resolved = path_part.empty() ? file : (file.parent_path() / path_part).lexically_normal();
      const std::string where = in_tree(file) + ":" + std::to_string(line_number) + ": " + target;
      if (!fs::exists(resolved)) {
        ADD_FAILURE() << where << " (no such file " << resolved.string() << ")";
        continue;
      }
      if (hash != std::string::npos && resolved.extension() == ".md") {
        const std::string anchor = target.substr(hash + 1);
        EXPECT_EQ(anchors_of(read_file(resolved)).count(anchor), 1u) << where << " (no such heading)";
      }
    }
    ++line_number;
  }
}

TEST_P(Docs, DescribeTheCurrentCodeNotItsHistory) {
  if (GetParam().filename() == "CHANGELOG.md") GTEST_SKIP() << "history belongs in CHANGELOG.md";
  const std::string prose = prose_of(read_file(GetParam()));
  static const std::regex history(
      R"(\b([Ii]ssue\s+#?[0-9]+|(first|second|third|fourth|fifth|sixth)\s+round|predates|helper-[0-9]+)\b)");
  static const std::regex commit_hash(R"(\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b)");
  int line_number = 1;
  for (const std::string& line : lines_of(prose)) {
    std::smatch m;
    if (std::regex_search(line, m, history))
      ADD_FAILURE() << in_tree(GetParam()) << ":" << line_number << ": development history (\"" << m.str()
                    << "\") belongs in CHANGELOG.md or a commit message";
    if (std::regex_search(line, m, commit_hash))
      ADD_FAILURE() << in_tree(GetParam()) << ":" << line_number << ": a commit hash (\"" << m.str()
                    << "\"): docs describe the current code";
    ++line_number;
  }
}

TEST_P(Docs, LeaveNoPlaceholderToFill) {
  int line_number = 1;
  for (const std::string& line : lines_of(read_file(GetParam()))) {
    if (line.find("<!-- lead") != std::string::npos)
      ADD_FAILURE() << in_tree(GetParam()) << ":" << line_number << ": a placeholder left to fill: " << line;
    ++line_number;
  }
}

TEST_P(Docs, NameNoPlaceholderHost) {
  // RFC 2606/6761 names: they resolve nowhere, so a snippet holding one cannot run as written.
  static const std::regex placeholder(
      R"((^|[^A-Za-z0-9.-])(([A-Za-z0-9-]+\.)*(example\.(com|net|org)|[A-Za-z0-9-]+\.(invalid|example)))\b)");
  int line_number = 1;
  for (const std::string& line : lines_of(read_file(GetParam()))) {
    std::smatch m;
    if (std::regex_search(line, m, placeholder))
      ADD_FAILURE() << in_tree(GetParam()) << ":" << line_number << ": a placeholder host (\"" << m.str(2)
                    << "\"): show a form a reader can run as written";
    ++line_number;
  }
}

TEST_P(Docs, CountTheKindsRight) {
  static const char* const numbers[] = {"one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"};
  static const std::regex counted(
      R"(\b(the|all|its|all of the) (one|two|three|four|five|six|seven|eight|nine|ten) (lock )?kinds\b)");
  const std::string prose = prose_of(read_file(GetParam()));
  int line_number = 1;
  for (const std::string& line : lines_of(prose)) {
    for (std::sregex_iterator it(line.begin(), line.end(), counted), end; it != end; ++it)
      if ((*it)[2] != numbers[lock_kinds.size() - 1])
        ADD_FAILURE() << in_tree(GetParam()) << ":" << line_number << ": \"" << it->str() << "\": there are "
                      << lock_kinds.size() << " kinds";
    ++line_number;
  }
}

TEST(DocsKinds, EveryEnumerationNamesEveryKind) {
  for (const kind_enumeration& e : kind_enumerations) {
    const std::string text = read_file(source_dir / e.file);
    const std::size_t at = text.find(e.marker);
    ASSERT_NE(at, std::string::npos) << e.file << ": \"" << e.marker << "\" not found (update kind_enumerations)";
    static const std::regex heading(R"(\n#+ )");  // it runs up to the next heading
    std::smatch next;
    const std::string from = text.substr(at);
    const std::string span = std::regex_search(from, next, heading) ? from.substr(0, next.position(0)) : from;
    for (const std::string& kind : lock_kinds) {
      if (std::find(e.exempt.begin(), e.exempt.end(), kind) != e.exempt.end()) continue;
      std::string pattern = kind;  // shared_mutex also matches "shared mutex", and basic_shared_mutex
      for (std::size_t i = 0; (i = pattern.find('_', i)) != std::string::npos; i += 6) pattern.replace(i, 1, "[_\\s]");
      EXPECT_TRUE(std::regex_search(span, std::regex("(\\b|basic_)" + pattern + "\\b")))
          << e.file << " (\"" << e.marker << "\") leaves out the kind " << kind;
    }
  }
}

TEST_P(Docs, ProgramPathsExistAfterTheBuild) {
  const std::string text = read_file(GetParam());
  // The build directories this page configures (cmake -B DIR) and those scripts/ configure.
  std::set<std::string> build_dirs = {"build/test", "build/asan", "build/tsan", "build/hiredis1", "build/bench"};
  static const std::regex configured(R"(-B\s+(build[A-Za-z0-9_./-]*))");
  for (std::sregex_iterator it(text.begin(), text.end(), configured), end; it != end; ++it) {
    std::string dir = (*it)[1];
    while (!dir.empty() && dir.back() == '/') dir.pop_back();
    build_dirs.insert(dir);
  }
  static const std::regex path(R"(\bbuild/[A-Za-z0-9_./-]*[A-Za-z0-9_])");
  static const std::regex program(R"((^|/)(tests|bench|examples|tools)/|(^|/)(test|bench)_[a-z0-9_]+$)");
  int line_number = 1;
  for (const std::string& line : lines_of(text)) {
    for (std::sregex_iterator it(line.begin(), line.end(), path), end; it != end; ++it) {
      const std::string p = it->str();
      const std::string last = p.substr(p.rfind('/') + 1);
      if (last.find('.') != std::string::npos || !std::regex_search(p.substr(std::string("build/").size()), program))
        continue;  // not a program: a report, a log, a prefix, ...
      // Under each configured build directory it starts with (build/bench/x: x in build/bench,
      // or bench/x in build), the program must exist after the build; programs of parts this
      // build leaves out (the benchmarks, when off) cannot be checked here.
      bool configured_dir = false, found = false;
      std::string looked_for;
      for (const std::string& d : build_dirs) {
        if (p.rfind(d + "/", 0) != 0) continue;
        configured_dir = true;
        const std::string rest = p.substr(d.size() + 1);
        const std::size_t slash = rest.find('/');
        if (fs::exists(binary_dir / rest) ||
            (slash != std::string::npos && !fs::exists(binary_dir / rest.substr(0, slash))))
          found = true;
        looked_for += " " + rest;
      }
      const std::string where = in_tree(GetParam()) + ":" + std::to_string(line_number) + ": " + p;
      if (!configured_dir)
        ADD_FAILURE() << where << ": no build directory of that name is configured (scripts/test.sh builds build/test)";
      else EXPECT_TRUE(found) << where << ": the build makes none of" << looked_for;
    }
    ++line_number;
  }
}

INSTANTIATE_TEST_SUITE_P(Markdown, Docs, ::testing::ValuesIn(markdown_files()),
                         [](const ::testing::TestParamInfo<fs::path>& info) {
                           std::string name = in_tree(info.param);
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

}  // namespace test_docs
