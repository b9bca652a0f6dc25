// The conditional blocks of a launch script (launch_conditions.h).
#include "launch_conditions.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <tuple>

namespace colo::planner::detail {
namespace {

// A word of a test: its text without quotes, and whether colo knows its value (no `$`, no backquote, and
// for a pattern no unquoted glob character).
struct Word {
  std::string text;
  bool quoted = false;
  bool known = true;
  bool glob = false;
};

// The words of a condition as the shell splits them: blanks outside quotes separate, quotes go.
std::vector<Word> splitWords(const std::string& s) {
  std::vector<Word> out;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    if (i >= s.size()) break;
    Word w;
    bool any = false;
    while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i]))) {
      const char c = s[i];
      if (c == '"' || c == '\'') {
        const std::size_t close = s.find(c, i + 1);
        const std::string inner = s.substr(i + 1, close == std::string::npos ? std::string::npos : close - i - 1);
        if (c == '"' && (inner.find('$') != std::string::npos || inner.find('`') != std::string::npos)) w.known = false;
        w.text += inner;
        w.quoted = true;
        i = close == std::string::npos ? s.size() : close + 1;
      } else {
        if (c == '$' || c == '`') w.known = false;
        if (c == '*' || c == '?' || c == '[') w.glob = true;
        w.text += c;
        ++i;
      }
      any = true;
    }
    if (any) out.push_back(std::move(w));
  }
  return out;
}

using Maybe = std::optional<bool>;

Maybe both(Maybe a, Maybe b) {
  if (a == false || b == false) return false;
  if (a && b) return true;
  return std::nullopt;
}

Maybe either(Maybe a, Maybe b) {
  if (a == true || b == true) return true;
  if (a && b) return false;
  return std::nullopt;
}

Maybe negate(Maybe a) { return a ? Maybe(!*a) : std::nullopt; }

std::optional<std::int64_t> integer(const Word& w) {
  std::int64_t v = 0;
  const char* end = w.text.data() + w.text.size();
  const auto [p, ec] = std::from_chars(w.text.data(), end, v);
  if (ec != std::errc() || p != end) return std::nullopt;
  return v;
}

// One primary inside [[ ]] or [ ]: `! x`, `-z A`, `-n A`, `A op B`, or `A` (true when not empty).
class Tests {
 public:
  Tests(const std::vector<Word>& words, std::size_t from, std::size_t to) : m_w(words), m_at(from), m_end(to) {}

  // Inside [[ ]]: || of && of primaries (bash's precedence there).
  Maybe orList() {
    Maybe value = andList();
    while (m_at < m_end && m_w[m_at].text == "||" && !m_w[m_at].quoted) {
      ++m_at;
      value = either(value, andList());
    }
    return value;
  }
  [[nodiscard]] bool done() const { return m_at == m_end; }

 private:
  Maybe andList() {
    Maybe value = primary();
    while (m_at < m_end && m_w[m_at].text == "&&" && !m_w[m_at].quoted) {
      ++m_at;
      value = both(value, primary());
    }
    return value;
  }

  Maybe primary() {
    bool negated = false;  // `! ! x` is x (counted, not recursed: a line may hold many)
    while (m_at < m_end && m_w[m_at].text == "!" && !m_w[m_at].quoted) {
      negated = !negated;
      ++m_at;
    }
    const Maybe value = unnegated();
    return negated ? negate(value) : value;
  }

  Maybe unnegated() {
    if (m_at >= m_end) return fail();
    const Word& first = m_w[m_at];
    if (!first.quoted && (first.text == "-z" || first.text == "-n") && m_at + 2 <= m_end && !isJoiner(m_at + 1)) {
      const Word& a = m_w[m_at + 1];
      m_at += 2;
      if (!a.known) return std::nullopt;
      return first.text == "-z" ? a.text.empty() : !a.text.empty();
    }
    if (!first.quoted && first.text.size() == 2 && first.text[0] == '-' && std::isalpha(static_cast<unsigned char>(first.text[1]))) {
      m_at = std::min(m_at + 2, m_end);  // -f FILE, -d DIR, ...: the file system, not known here
      return std::nullopt;
    }
    if (m_at + 1 < m_end && !isJoiner(m_at + 1)) {  // A op B
      if (m_at + 3 > m_end) return fail();
      const Word& a = m_w[m_at];
      const Word& op = m_w[m_at + 1];
      const Word& b = m_w[m_at + 2];
      m_at += 3;
      return compare(a, op, b);
    }
    ++m_at;  // one word: true when it is not empty
    if (!first.known) return std::nullopt;
    return !first.text.empty();
  }

  static Maybe compare(const Word& a, const Word& op, const Word& b) {
    if (op.quoted) return std::nullopt;
    if (op.text == "==" || op.text == "=" || op.text == "!=") {
      if (!a.known || !b.known || (b.glob && !b.quoted)) return std::nullopt;
      const bool same = a.text == b.text;
      return op.text == "!=" ? !same : same;
    }
    static const std::vector<std::string> numeric = {"-eq", "-ne", "-lt", "-le", "-gt", "-ge"};
    for (std::size_t k = 0; k < numeric.size(); ++k) {
      if (op.text != numeric[k]) continue;
      const auto x = integer(a);
      const auto y = integer(b);
      if (!a.known || !b.known || !x || !y) return std::nullopt;
      const bool results[] = {*x == *y, *x != *y, *x < *y, *x <= *y, *x > *y, *x >= *y};
      return results[k];
    }
    return std::nullopt;  // =~, <, >, -nt, ...
  }

  [[nodiscard]] bool isJoiner(std::size_t i) const {
    return i < m_end && !m_w[i].quoted && (m_w[i].text == "&&" || m_w[i].text == "||");
  }
  Maybe fail() {  // malformed: nothing is known, and the rest is not read
    m_at = m_end;
    return std::nullopt;
  }

  const std::vector<Word>& m_w;
  std::size_t m_at;
  std::size_t m_end;
};

// The condition of an `if` or `elif` line: the text after the keyword, before `; then` / `then`.
std::string conditionOf(const std::string& rest) {
  std::string c = rest;
  const auto hash = c.find(" #");
  if (hash != std::string::npos) c.resize(hash);
  while (!c.empty() && std::isspace(static_cast<unsigned char>(c.back()))) c.pop_back();
  if (c.ends_with("then")) c.resize(c.size() - 4);
  while (!c.empty() && (std::isspace(static_cast<unsigned char>(c.back())) || c.back() == ';')) c.pop_back();
  return c;
}

// The line's first word and what follows it.
std::pair<std::string, std::string> keyword(const std::string& line) {
  const auto from = line.find_first_not_of(" \t");
  if (from == std::string::npos) return {};
  const auto end = line.find_first_of(" \t;", from);
  const std::string word = line.substr(from, end == std::string::npos ? std::string::npos : end - from);
  return {word, end == std::string::npos ? "" : line.substr(end)};
}

// The words of a line as commands see them: outside quotes, up to a comment, split at blanks and at the
// separators ; & | (so "x=1;fi" holds "fi").
std::vector<std::string> commandWords(const std::string& line) {
  std::vector<std::string> out;
  std::string word;
  char quote = 0;
  auto flush = [&] {
    if (!word.empty()) out.push_back(word);
    word.clear();
  };
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quote) {
      if (c == quote) quote = 0;
      word += c;
    } else if (c == '"' || c == '\'') {
      quote = c;
      word += c;
    } else if (c == '#' && word.empty()) {
      break;  // a comment
    } else if (std::isspace(static_cast<unsigned char>(c)) || c == ';' || c == '&' || c == '|') {
      flush();
    } else {
      word += c;
    }
  }
  flush();
  return out;
}

// A here-document's end word in a line (`<<END`, `<<-END`, `<<'END'`), outside quotes; nothing else
// (a here-string `<<<` is not one).
std::optional<std::pair<std::string, bool>> heredoc(const std::string& line) {
  char quote = 0;
  for (std::size_t i = 0; i + 1 < line.size(); ++i) {
    const char c = line[i];
    if (quote) {
      if (c == quote) quote = 0;
      continue;
    }
    if (c == '"' || c == '\'') {
      quote = c;
      continue;
    }
    if (c == '#' && (i == 0 || std::isspace(static_cast<unsigned char>(line[i - 1])))) return std::nullopt;
    if (c != '<' || line[i + 1] != '<') continue;
    if (i + 2 < line.size() && line[i + 2] == '<') return std::nullopt;
    std::size_t at = i + 2;
    const bool tabs = at < line.size() && line[at] == '-';
    if (tabs) ++at;
    while (at < line.size() && (line[at] == ' ' || line[at] == '\t')) ++at;
    std::string end;
    while (at < line.size() && !std::isspace(static_cast<unsigned char>(line[at])) && line[at] != ';' && line[at] != '|' &&
           line[at] != '&' && line[at] != ')') {
      if (line[at] != '\'' && line[at] != '"' && line[at] != '\\') end += line[at];
      ++at;
    }
    if (end.empty()) return std::nullopt;
    return std::pair{end, tabs};
  }
  return std::nullopt;
}

}  // namespace

std::optional<bool> shellCondition(const std::string& condition) {
  const std::vector<Word> words = splitWords(condition);
  if (words.empty()) return std::nullopt;
  // Tests joined by && and || outside brackets, left to right with equal precedence (bash's lists).
  std::optional<bool> value;
  std::string joiner;
  std::size_t i = 0;
  bool first = true;
  while (i < words.size()) {
    bool negated = false;
    if (words[i].text == "!" && !words[i].quoted) {
      negated = true;
      ++i;
    }
    if (i >= words.size()) return std::nullopt;
    const std::string open = words[i].text;
    if (words[i].quoted || (open != "[[" && open != "[")) return std::nullopt;  // a command: not ours to run
    const std::string close = open == "[[" ? "]]" : "]";
    std::size_t end = i + 1;
    while (end < words.size() && !(words[end].text == close && !words[end].quoted)) ++end;
    if (end >= words.size()) return std::nullopt;
    Tests tests(words, i + 1, end);
    std::optional<bool> test = tests.orList();
    if (!tests.done()) test = std::nullopt;
    if (negated) test = negate(test);
    value = first ? test : joiner == "&&" ? both(value, test) : either(value, test);
    first = false;
    i = end + 1;
    if (i >= words.size()) break;
    joiner = words[i].text;
    if (words[i].quoted || (joiner != "&&" && joiner != "||")) return std::nullopt;
    ++i;
    if (i >= words.size()) return std::nullopt;
  }
  return value;
}

bool ShellBranches::isTest(const std::string& line) {
  const auto words = commandWords(line);
  return !words.empty() && (words.front() == "if" || words.front() == "elif");
}

bool ShellBranches::certain() const {
  return std::all_of(m_frames.begin(), m_frames.end(), [](const Frame& f) { return f.known; });
}

bool ShellBranches::take(const std::string& line) {
  if (!m_heredocEnd.empty()) {  // a here-document's body is text, up to its end word alone on a line
    std::string t = line;
    while (!t.empty() && (t.back() == '\r' || t.back() == ' ')) t.pop_back();
    if (m_heredocTabs) t.erase(0, t.find_first_not_of('\t') == std::string::npos ? t.size() : t.find_first_not_of('\t'));
    if (t == m_heredocEnd) m_heredocEnd.clear();
    return active();
  }
  if (const auto doc = heredoc(line)) std::tie(m_heredocEnd, m_heredocTabs) = *doc;
  const std::vector<std::string> words = commandWords(line);
  const auto count = [&](const char* w) { return std::count(words.begin(), words.end(), std::string(w)); };
  const std::string first = words.empty() ? "" : words.front();
  const auto ifs = count("if");
  const auto fis = count("fi");
  if (first == "if") {
    if (fis >= ifs) return active();  // a whole `if ...; then ...; fi` on one line is read as written
    if (ifs > 1) m_broken = true;
    const bool was = active();
    open(was ? shellCondition(conditionOf(keyword(line).second)) : std::nullopt);
    return was;
  }
  if (first != "elif" && first != "else" && first != "fi") {
    if (ifs != fis) m_broken = true;  // `x; fi`, `echo if`: nesting colo does not follow
    return active();
  }
  if (m_frames.empty() || ifs > 0 || fis > (first == "fi" ? 1 : 0)) {
    m_broken = true;  // a keyword without its if, or blocks opened and closed within the line
    return true;
  }
  if (first == "elif") {
    next(m_frames.back().parentActive ? shellCondition(conditionOf(keyword(line).second)) : std::nullopt);
    return m_frames.back().parentActive;
  }
  if (first == "else") {
    next(true);
    return m_frames.back().parentActive;
  }
  const bool parent = m_frames.back().parentActive;  // fi
  m_frames.pop_back();
  return parent;
}

void ShellBranches::open(const std::optional<bool>& test) {
  Frame f;
  f.parentActive = active();
  f.known = test.has_value();
  f.taken = test.value_or(false);
  f.active = f.parentActive && test.value_or(true);
  m_frames.push_back(f);
}

void ShellBranches::next(const std::optional<bool>& test) {
  Frame& f = m_frames.back();
  if (!f.known) {  // an earlier test was not known: every branch is read, as before
    f.active = f.parentActive;
    return;
  }
  if (f.taken) {
    f.active = false;
    return;
  }
  f.known = test.has_value();
  f.taken = test.value_or(false);
  f.active = f.parentActive && test.value_or(true);
}

}  // namespace colo::planner::detail
