// Launch scripts as users write them: their shell variables, and the launcher options that say how many
// GPUs the job starts and which DeepSpeed config it reads (launch.h).
#include "colo/planner/launch.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <tuple>
#include <sstream>
#include <vector>

#include "colo/planner/export_check.h"

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

// `NAME=value` or `export NAME=value` (the value unquoted), or nothing.
std::optional<std::pair<std::string, std::string>> assignmentOf(const std::string& line) {
  std::size_t at = line.find_first_not_of(" \t");
  if (at == std::string::npos) return std::nullopt;
  if (line.compare(at, 7, "export ") == 0) at = line.find_first_not_of(" \t", at + 7);
  if (at == std::string::npos || !identifierStart(line[at])) return std::nullopt;
  std::size_t end = at;
  while (end < line.size() && identifierChar(line[end])) ++end;
  if (end >= line.size() || line[end] != '=') return std::nullopt;
  // A trailing comment (a # after a blank, outside quotes) is not part of the value: TP="2"  # tp.
  std::string value = line.substr(end + 1);
  char quote = 0;
  for (std::size_t i = 0; i < value.size(); ++i) {
    const char c = value[i];
    if ((c == '"' || c == '\'') && (quote == 0 || quote == c)) quote = quote == 0 ? c : 0;
    if (c == '#' && quote == 0 && i > 0 && std::isspace(static_cast<unsigned char>(value[i - 1]))) {
      value.resize(i);
      break;
    }
  }
  return std::make_pair(line.substr(at, end - at), unquoted(value));
}

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

}  // namespace

Result<std::string> expandShellVariables(const std::string& script) {
  std::map<std::string, std::string> vars;
  std::string out;
  std::istringstream in(script);
  // A quoted value over several lines (GPT_ARGS="\n --num-layers 32 \\\n ...\n"): its name, the
  // value so far (continuations joined), and its quote.
  std::optional<std::pair<std::string, std::string>> pending;
  char pendingQuote = 0;
  // A bash array (NAME=( ... ) or NAME+=( ... ), over lines): its elements as written, quotes kept,
  // stored as NAME[@] and NAME[*] so that ${NAME[@]} expands to them (NVIDIA's Megatron-LM scripts).
  // (Matched by hand, not std::regex: its recursion overflows the stack on a long line.)
  auto arrayStart = [](const std::string& text) -> std::optional<std::tuple<std::string, bool, std::string>> {
    std::size_t at = text.find_first_not_of(" \t");
    if (at == std::string::npos) return std::nullopt;
    if (text.compare(at, 7, "export ") == 0) at = text.find_first_not_of(" \t", at + 7);
    if (at == std::string::npos || !identifierStart(text[at])) return std::nullopt;
    std::size_t end = at;
    while (end < text.size() && identifierChar(text[end])) ++end;
    const bool append = end < text.size() && text[end] == '+';
    const std::size_t eq = end + (append ? 1 : 0);
    if (eq + 1 >= text.size() || text[eq] != '=' || text[eq + 1] != '(') return std::nullopt;
    return std::make_tuple(text.substr(at, end - at), append, text.substr(eq + 2));
  };
  std::optional<std::string> arrayName;
  std::string arrayValue;
  auto arrayPart = [&](const std::string& text) {
    // The part up to a closing ) outside quotes; true when it closes the array.
    char quote = 0;
    for (std::size_t i = 0; i < text.size(); ++i) {
      const char c = text[i];
      if ((c == '"' || c == '\'') && (quote == 0 || quote == c)) quote = quote == 0 ? c : 0;
      if (c == ')' && quote == 0) {
        arrayValue += " " + text.substr(0, i);
        return true;
      }
      if (c == '#' && quote == 0 && (i == 0 || std::isspace(static_cast<unsigned char>(text[i - 1])))) {
        arrayValue += " " + text.substr(0, i);  // a comment ends the line
        return false;
      }
    }
    std::string part = text;
    while (!part.empty() && (std::isspace(static_cast<unsigned char>(part.back())) || part.back() == '\\')) part.pop_back();
    arrayValue += " " + part;
    return false;
  };
  auto closeArray = [&]() {
    vars[*arrayName + "[@]"] = arrayValue;
    vars[*arrayName + "[*]"] = arrayValue;
    arrayName.reset();
  };
  for (std::string line; std::getline(in, line);) {
    if (arrayName) {
      const auto first = line.find_first_not_of(" \t");
      if (first == std::string::npos || line[first] != '#') {
        auto expanded = substitute(line, vars);
        if (!expanded) return fail(expanded.error());
        if (arrayPart(*expanded)) closeArray();
        out += *expanded + "\n";
      } else {
        out += line + "\n";
      }
      continue;
    }
    if (pending) {
      auto expanded = substitute(line, vars);
      if (!expanded) return fail(expanded.error());
      std::string part = *expanded;
      const std::size_t close = part.find(pendingQuote);
      if (close != std::string::npos) part.resize(close);
      while (!part.empty() && (std::isspace(static_cast<unsigned char>(part.back())) || part.back() == '\\')) part.pop_back();
      pending->second += " " + part;
      if (close != std::string::npos) {
        vars[pending->first] = pending->second;
        pending.reset();
      }
      out += *expanded + "\n";
      continue;
    }
    const auto first = line.find_first_not_of(" \t");
    if (first != std::string::npos && line[first] == '#') {
      out += line + "\n";
      continue;
    }
    auto expanded = substitute(line, vars);
    if (!expanded) return fail(expanded.error());
    if (const auto array = arrayStart(*expanded)) {
      const auto& [name, append, rest] = *array;
      arrayName = name;
      const auto it = vars.find(name + "[@]");
      arrayValue = append && it != vars.end() ? it->second : "";
      if (arrayPart(rest)) closeArray();
      out += *expanded + "\n";
      continue;
    }
    if (const auto a = assignmentOf(*expanded)) {
      // Arrays stay as written, and so does a quoted value that goes on over more lines (its name is
      // then left unexpanded where it is used, not replaced by a stray quote).
      const std::string& v = a->second;
      const bool open = !v.empty() && (v.front() == '"' || v.front() == '\'') && (v.size() == 1 || v.back() != v.front());
      if ((v.empty() || v.front() != '(') && !open) vars[a->first] = v;
      if (open && v.find(v.front(), 1) == std::string::npos) {
        std::string opening = v.substr(1);
        while (!opening.empty() && (std::isspace(static_cast<unsigned char>(opening.back())) || opening.back() == '\\')) opening.pop_back();
        pending = std::make_pair(a->first, opening);
        pendingQuote = v.front();
      }
    }
    out += *expanded + "\n";
  }
  return out;
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
