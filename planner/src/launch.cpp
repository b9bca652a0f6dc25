// Launch scripts as users write them: their shell variables, and the launcher options that say how many
// GPUs the job starts and which DeepSpeed config it reads (launch.h).
#include "colo/planner/launch.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <optional>
#include <tuple>
#include <sstream>
#include <vector>

#include "colo/planner/export_check.h"
#include "launch_conditions.h"

namespace colo::planner {
namespace {

constexpr std::int64_t kMaxCount = 1 << 24;
constexpr int kMaxDepth = 64;  // nesting of $(( )) and of parentheses and signs inside it

bool identifierStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool identifierChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Integer arithmetic of $(( )): + - * / % and parentheses over numbers and variables.
class Arithmetic {
 public:
  Arithmetic(const std::string& text, const std::map<std::string, std::string>& vars, int depth = 0)
      : m_text(text), m_vars(vars), m_depth(depth) {}
  Result<std::int64_t> evaluate() {
    auto v = sum();
    if (!v) return v;
    skipSpace();
    if (m_at != m_text.size()) return fail(Error::badInput("unexpected \"" + m_text.substr(m_at) + "\""));
    return v;
  }

 private:
  void skipSpace() {
    while (m_at < m_text.size() && std::isspace(static_cast<unsigned char>(m_text[m_at]))) ++m_at;
  }
  Result<std::int64_t> sum() {
    auto left = product();
    if (!left) return left;
    std::int64_t value = *left;
    for (skipSpace(); m_at < m_text.size() && (m_text[m_at] == '+' || m_text[m_at] == '-'); skipSpace()) {
      const char op = m_text[m_at++];
      auto right = product();
      if (!right) return right;
      value = op == '+' ? value + *right : value - *right;
    }
    return value;
  }
  Result<std::int64_t> product() {
    auto left = unary();
    if (!left) return left;
    std::int64_t value = *left;
    for (skipSpace(); m_at < m_text.size() && (m_text[m_at] == '*' || m_text[m_at] == '/' || m_text[m_at] == '%'); skipSpace()) {
      const char op = m_text[m_at++];
      auto right = unary();
      if (!right) return right;
      if (op != '*' && *right == 0) return fail(Error::badInput("division by zero"));
      value = op == '*' ? value * *right : op == '/' ? value / *right : value % *right;
      if (value > kMaxCount * kMaxCount || value < -kMaxCount * kMaxCount) return fail(Error::badInput("result out of range"));
    }
    return value;
  }
  Result<std::int64_t> unary() {
    skipSpace();
    if (++m_depth > kMaxDepth) return fail(Error::badInput("nested too deeply"));
    if (m_at < m_text.size() && m_text[m_at] == '-') {
      ++m_at;
      auto v = unary();
      if (!v) return v;
      return -*v;
    }
    if (m_at < m_text.size() && m_text[m_at] == '(') {
      ++m_at;
      auto v = sum();
      if (!v) return v;
      skipSpace();
      if (m_at >= m_text.size() || m_text[m_at] != ')') return fail(Error::badInput("missing )"));
      ++m_at;
      return v;
    }
    if (m_at < m_text.size() && m_text[m_at] == '$') ++m_at;  // $NAME inside $(( )) reads as NAME
    const std::size_t from = m_at;
    if (m_at < m_text.size() && identifierStart(m_text[m_at])) {
      while (m_at < m_text.size() && identifierChar(m_text[m_at])) ++m_at;
      const std::string name = m_text.substr(from, m_at - from);
      const auto it = m_vars.find(name);
      if (it == m_vars.end()) return fail(Error::badInput("$" + name + " is not defined in the script"));
      return Arithmetic(it->second, {}, m_depth).evaluate();
    }
    while (m_at < m_text.size() && std::isdigit(static_cast<unsigned char>(m_text[m_at]))) ++m_at;
    if (m_at == from || m_at - from > 12) return fail(Error::badInput("expected a number at \"" + m_text.substr(from) + "\""));
    return std::stoll(m_text.substr(from, m_at - from));
  }

  std::string m_text;
  const std::map<std::string, std::string>& m_vars;
  std::size_t m_at = 0;
  int m_depth = 0;
};

// `$NAME`, `${NAME}` and `${NAME:-default}` of defined names, then each `$(( ))`, in one line.
Result<std::string> substitute(const std::string& line, const std::map<std::string, std::string>& vars, int depth = 0) {
  if (depth > kMaxDepth) return fail(Error::badInput("$(( )) nested too deeply"));
  std::string out;
  for (std::size_t i = 0; i < line.size();) {
    if (line[i] != '$') {
      out += line[i++];
      continue;
    }
    if (line.compare(i, 3, "$((") == 0) {
      // What colo cannot evaluate (a command substitution, a ternary, a name the script does not define,
      // a division by zero) stays as written: the launch names it if an argument that matters uses it,
      // and a line that does not matter (a resume loop, a log path) does not stop the import.
      const std::size_t end = line.find("))", i + 3);
      if (end == std::string::npos) {
        out += line.substr(i);
        break;
      }
      auto inner = substitute(line.substr(i + 3, end - i - 3), vars, depth + 1);
      auto value = inner ? Arithmetic(*inner, vars).evaluate() : Result<std::int64_t>(fail(inner.error()));
      if (!value) {
        out += line.substr(i, end + 2 - i);
        i = end + 2;
        continue;
      }
      out += std::to_string(*value);
      i = end + 2;
      continue;
    }
    if (i + 1 < line.size() && line[i + 1] == '{') {
      const std::size_t end = line.find('}', i + 2);
      if (end == std::string::npos) {
        out += line[i++];
        continue;
      }
      const std::string body = line.substr(i + 2, end - i - 2);
      const std::size_t dflt = body.find(":-");
      const std::string name = body.substr(0, dflt);
      const auto it = vars.find(name);
      if (it != vars.end()) {
        out += it->second;
      } else if (dflt != std::string::npos && std::all_of(name.begin(), name.end(), identifierChar)) {
        out += body.substr(dflt + 2);
      } else {
        out += line.substr(i, end + 1 - i);  // unknown (or an array): as written
      }
      i = end + 1;
      continue;
    }
    std::size_t end = i + 1;
    while (end < line.size() && identifierChar(line[end])) ++end;
    const auto it = vars.find(line.substr(i + 1, end - i - 1));
    out += it != vars.end() && end > i + 1 ? it->second : line.substr(i, end - i);
    i = end;
  }
  return out;
}

std::string unquoted(std::string v) {
  while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back()))) v.pop_back();
  if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front()) v = v.substr(1, v.size() - 2);
  return v;
}

// The head of an assignment: `NAME=`, or `NAME+=` (bash appends), after an optional `export `; the text
// after the `=` as written. Nothing for any other line. (Matched by hand, not std::regex: its recursion
// overflows the stack on a long line.)
struct AssignmentHead {
  std::string name;
  bool append = false;
  std::string rest;
};

std::optional<AssignmentHead> assignmentHead(const std::string& line) {
  std::size_t at = line.find_first_not_of(" \t");
  if (at == std::string::npos) return std::nullopt;
  if (line.compare(at, 7, "export ") == 0) at = line.find_first_not_of(" \t", at + 7);
  if (at == std::string::npos || !identifierStart(line[at])) return std::nullopt;
  std::size_t end = at;
  while (end < line.size() && identifierChar(line[end])) ++end;
  const bool append = end < line.size() && line[end] == '+';
  const std::size_t eq = end + (append ? 1 : 0);
  if (eq >= line.size() || line[eq] != '=') return std::nullopt;
  return AssignmentHead{line.substr(at, end - at), append, line.substr(eq + 1)};
}

// A one-line value as the shell reads it: a trailing comment (a # after a blank, outside quotes) is not
// part of it (TP="2"  # tp), and its quotes go.
std::string valueOf(std::string value) {
  char quote = 0;
  for (std::size_t i = 0; i < value.size(); ++i) {
    const char c = value[i];
    if ((c == '"' || c == '\'') && (quote == 0 || quote == c)) quote = quote == 0 ? c : 0;
    if (c == '#' && quote == 0 && i > 0 && std::isspace(static_cast<unsigned char>(value[i - 1]))) {
      value.resize(i);
      break;
    }
  }
  return unquoted(value);
}

// A line's text without the blanks and the continuation backslash at its end.
std::string withoutLineEnd(std::string text) {
  while (!text.empty() && (std::isspace(static_cast<unsigned char>(text.back())) || text.back() == '\\')) text.pop_back();
  return text;
}

// A value that goes on over several lines, joined with blanks: a bash array (NAME=( ... ) or NAME+=( ... ),
// its elements as written, quotes kept, closed by a ) outside quotes, a # after a blank starting a
// comment) or a quoted value (GPT_ARGS="\n --num-layers 32 \\\n ...\n", closed by its quote).
class OpenValue {
 public:
  static OpenValue array(std::string name, std::string value) { return OpenValue(std::move(name), std::move(value), ')'); }
  static OpenValue quoted(std::string name, char quote) { return OpenValue(std::move(name), "", quote); }

  [[nodiscard]] bool isArray() const { return m_closer == ')'; }

  // Takes the next (expanded) line; true when the value closes in it.
  bool take(const std::string& text) {
    char quote = 0;
    for (std::size_t i = 0; i < text.size(); ++i) {
      const char c = text[i];
      if (!isArray()) {
        if (c != m_closer) continue;
        add(withoutLineEnd(text.substr(0, i)));
        return true;
      }
      if ((c == '"' || c == '\'') && (quote == 0 || quote == c)) quote = quote == 0 ? c : 0;
      if (quote != 0) continue;
      if (c == ')') {
        add(text.substr(0, i));
        return true;
      }
      if (c == '#' && (i == 0 || std::isspace(static_cast<unsigned char>(text[i - 1])))) {
        add(text.substr(0, i));
        return false;
      }
    }
    add(withoutLineEnd(text));
    return false;
  }

  // Where ${NAME} (an array: ${NAME[@]}, ${NAME[*]}) finds the value.
  void store(std::map<std::string, std::string>& vars) const {
    if (!isArray()) {
      vars[m_name] = m_value;
      return;
    }
    vars[m_name + "[@]"] = m_value;
    vars[m_name + "[*]"] = m_value;
  }

 private:
  OpenValue(std::string name, std::string value, char closer) : m_name(std::move(name)), m_value(std::move(value)), m_closer(closer) {}
  // Parts join with a blank; an array's parts each start with one (as the words they are).
  void add(const std::string& part) {
    m_value += (isArray() || m_parts > 0 ? " " : "") + part;
    ++m_parts;
  }
  std::string m_name;
  std::string m_value;
  char m_closer;
  int m_parts = 0;
};

// The words of a launch (shellWords), `--flag=value` as two words.
std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out;
  for (const std::string& w : shellWords(text)) {
    const auto eq = w.find('=');
    if (w.rfind("--", 0) == 0 && eq != std::string::npos) {
      out.push_back(w.substr(0, eq));
      out.push_back(w.substr(eq + 1));
    } else {
      out.push_back(w);
    }
  }
  return out;
}

Result<std::int64_t> count(const std::string& option, const std::string& value) {
  const bool digits = !value.empty() && value.size() <= 8 && std::all_of(value.begin(), value.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  const std::int64_t n = digits ? std::stoll(value) : 0;
  if (n <= 0 || n > kMaxCount) {
    std::string why = value.find(':') != std::string::npos ? " (an elastic range: give the job's size with --gpus)"
                      : value.find('$') != std::string::npos ? " (a variable the script does not define: define it, or give --gpus)"
                                                             : "";
    return fail(Error::badInput(option + ": expected a positive integer, got \"" + value + "\"" + why));
  }
  return n;
}

// deepspeed --include "host:0,1,2@host2:0,1": the GPUs listed.
Result<std::int64_t> includedGpus(const std::string& value) {
  std::int64_t total = 0;
  std::istringstream hosts(value);
  for (std::string host; std::getline(hosts, host, '@');) {
    const auto colon = host.find(':');
    if (colon == std::string::npos || colon + 1 == host.size()) {
      return fail(Error::badInput("--include: \"" + host + "\" names a host without its GPUs (host:0,1,...): give --gpus"));
    }
    std::istringstream slots(host.substr(colon + 1));
    for (std::string slot; std::getline(slots, slot, ',');) {
      if (slot.empty() || !std::all_of(slot.begin(), slot.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
        return fail(Error::badInput("--include: \"" + slot + "\" is not a GPU index in \"" + host + "\""));
      }
      ++total;
    }
  }
  return total;
}

// Each line with the variables set so far substituted; NAME=value lines set them, bash arrays and quoted
// values over several lines once they close (OpenValue). Comments stay as written. With `follow`, the
// lines of an `if` branch the script does not take (its test known false, or an earlier branch taken)
// are left out (detail::ShellBranches); a test reads only names whose value is certain (not set inside
// a branch colo could not rule out, not appended to with +=, not unset or read). `broken` says whether
// the blocks could not be followed.
Result<std::string> expand(const std::string& script, bool follow, bool& broken) {
  std::map<std::string, std::string> vars;
  std::set<std::string> uncertain;
  std::string out;
  std::istringstream in(script);
  std::optional<OpenValue> open;
  detail::ShellBranches branches;
  // The line as a test reads it: its certain names substituted (`expanded`, unless some are not).
  auto forTest = [&](const std::string& line, const std::string& expanded) {
    if (uncertain.empty() || !detail::ShellBranches::isTest(line)) return expanded;
    auto certainVars = vars;
    for (const auto& name : uncertain) {
      certainVars.erase(name);
      certainVars.erase(name + "[@]");
    }
    const auto e = substitute(line, certainVars);
    return e ? *e : line;
  };
  auto set = [&](const std::string& name) {
    if (follow && !branches.certain()) {
      uncertain.insert(name);
    } else {
      uncertain.erase(name);
    }
  };
  for (std::string line; std::getline(in, line);) {
    const auto first = line.find_first_not_of(" \t");
    const bool comment = first != std::string::npos && line[first] == '#';
    // A comment line is one, but inside a quoted value (where # is text).
    if (comment && (!open || open->isArray())) {
      out += line + "\n";
      continue;
    }
    auto expanded = substitute(line, vars);
    if (follow && !open) {
      // Inside a branch not taken only its if/elif/else/fi count (and an expansion that fails there
      // does not matter: it leaves a test unknown).
      const bool wasActive = branches.active();
      const bool read = branches.take(forTest(line, expanded ? *expanded : line));
      if (!wasActive || !read) continue;
    }
    if (!expanded) return fail(expanded.error());
    out += *expanded + "\n";
    if (open) {
      if (open->take(*expanded)) {
        open->store(vars);
        open.reset();
      }
      continue;
    }
    // unset NAME / read NAME: the name's value is no longer what colo holds.
    if (const auto words = shellWords(*expanded); !words.empty() && (words.front() == "unset" || words.front() == "read")) {
      for (std::size_t i = 1; i < words.size(); ++i) {
        if (words[i].empty() || !identifierStart(words[i].front())) continue;
        vars.erase(words[i]);
        vars.erase(words[i] + "[@]");
        uncertain.insert(words[i]);
      }
      continue;
    }
    const auto head = assignmentHead(*expanded);
    if (!head) continue;
    if (head->rest.starts_with("(")) {
      const auto before = vars.find(head->name + "[@]");
      open = OpenValue::array(head->name, head->append && before != vars.end() ? before->second : "");
      set(head->name);
      if (open->take(head->rest.substr(1))) {
        open->store(vars);
        open.reset();
      }
      continue;
    }
    if (head->append) {  // NAME+=text: not followed, so its value is no longer certain
      uncertain.insert(head->name);
      continue;
    }
    // A quoted value that goes on over more lines is set once it closes (until then its name is left
    // unexpanded where it is used, not replaced by a stray quote); one that holds quotes of its own is
    // left unset.
    const std::string v = valueOf(head->rest);
    const bool unclosed = !v.empty() && (v.front() == '"' || v.front() == '\'') && (v.size() == 1 || v.back() != v.front());
    set(head->name);
    if (!unclosed) {
      vars[head->name] = v;
    } else if (v.find(v.front(), 1) == std::string::npos) {
      open = OpenValue::quoted(head->name, v.front());
      (void)open->take(v.substr(1));
    }
  }
  broken = branches.broken();
  return out;
}

}  // namespace

Result<std::string> expandShellVariables(const std::string& script) {
  bool broken = false;
  auto followed = expand(script, true, broken);
  if (!followed || !broken) return followed;
  return expand(script, false, broken);  // blocks colo cannot follow: every branch is read, as before
}

std::int64_t LaunchFacts::world() const {
  if (included > 0) return included;
  if (gpusPerNode > 0) return std::max<std::int64_t>(1, nodes) * gpusPerNode;
  return 0;
}

std::string LaunchFacts::describe() const {
  if (included > 0) return "--include lists " + std::to_string(included) + " GPUs";
  if (gpusPerNode > 0) return (nodes > 0 ? std::to_string(nodes) + " nodes x " : "") + std::to_string(gpusPerNode) + " GPUs per node";
  return "the launch does not say";
}

Result<LaunchFacts> launchFacts(const std::string& launch) {
  auto expanded = expandShellVariables(launch);
  if (!expanded) return fail(expanded.error());
  const std::vector<std::string> w = words(*expanded);
  LaunchFacts f;
  for (std::size_t i = 0; i + 1 < w.size(); ++i) {
    const std::string& option = w[i];
    const std::string& value = w[i + 1];
    if (option == "--num_nodes" || option == "--nnodes") {
      auto n = count(option, value);
      if (!n) return fail(n.error());
      f.nodes = *n;
    } else if (option == "--num_gpus" || option == "--num_accelerators" || option == "--nproc_per_node" || option == "--nproc-per-node") {
      auto n = count(option, value);
      if (!n) return fail(n.error());
      f.gpusPerNode = *n;
    } else if (option == "--include") {
      auto n = includedGpus(value);
      if (!n) return fail(n.error());
      f.included = *n;
    } else if (option == "--hostfile") {
      f.hostfile = value;
    } else if (option == "--deepspeed_config" || option == "--deepspeed-config") {
      f.deepspeedConfig = value;
    }
  }
  return f;
}

Result<std::int64_t> hostfileSlots(const std::string& text) {
  std::int64_t total = 0;
  std::istringstream in(text);
  int number = 0;
  for (std::string l; std::getline(in, l);) {
    ++number;
    const auto first = l.find_first_not_of(" \t\r");
    if (first == std::string::npos || l[first] == '#') continue;
    if (!l.empty() && l.back() == '\r') l.pop_back();
    // "host slots=N": a host name, then slots, =, a count.
    std::istringstream words(l);
    std::string host, rest;
    words >> host;
    std::getline(words, rest);
    rest.erase(std::remove_if(rest.begin(), rest.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); }), rest.end());
    const std::string digits = rest.rfind("slots=", 0) == 0 ? rest.substr(6) : "";
    const bool ok = !digits.empty() && digits.size() <= 6 &&
                    std::all_of(digits.begin(), digits.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    if (!ok || std::stoll(digits) <= 0) {
      return fail(Error::badInput("line " + std::to_string(number) + ": expected \"host slots=N\", got \"" + l + "\""));
    }
    total += std::stoll(digits);
  }
  if (total == 0) return fail(Error::badInput("no \"host slots=N\" line"));
  return total;
}

}  // namespace colo::planner
