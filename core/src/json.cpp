#include "colo/core/json.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>
#include <system_error>
#include <unistd.h>

#include "colo/core/limits.h"

namespace colo {
namespace {

// nlohmann reports a byte offset; users need a line and a column.
std::string lineColumn(const std::string& text, std::size_t byteOffset) {
  std::size_t line = 1;
  std::size_t column = 1;
  const std::size_t end = std::min(byteOffset, text.size());
  for (std::size_t i = 0; i + 1 < end; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

// The byte offset where `text` nests deeper than the limit, if it does. nlohmann parses iteratively,
// but copying, comparing, dumping and reading a document recurse, so a document 50,000 levels deep
// would overflow the stack later; it is refused here, before nlohmann sees it.
std::optional<std::size_t> tooDeepAt(const std::string& text) {
  int depth = 0;
  bool inString = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (inString) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        inString = false;
      }
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limits::kMaxJsonDepth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::nullopt;
}

// nlohmann's parse error: "[json.exception.parse_error.101] parse error at line 1, column 39: syntax
// error while parsing value - invalid literal; last read: '{"a": 1, "dropout": N'". colo gives the line
// and column itself; this keeps the explanation and the last few characters read, on one line.
std::string parseReason(const std::string& what) {
  std::string reason = what;
  if (const auto column = what.find("column "); column != std::string::npos) {
    if (const auto colon = what.find(": ", column); colon != std::string::npos) reason = what.substr(colon + 2);
  } else if (const auto bracket = what.find("] "); bracket != std::string::npos) {
    reason = what.substr(bracket + 2);
  }
  constexpr std::string_view kLastRead = "; last read: '";
  const auto last = reason.find(kLastRead);
  if (last == std::string::npos) return reason;
  // What was read is quoted; an expectation may follow it ("...; last read: '{''; expected string literal").
  std::string read = reason.substr(last + kLastRead.size());
  std::string expected;
  if (const auto end = read.rfind("'; expected "); end != std::string::npos) {
    expected = read.substr(end + 1);
    read.erase(end);
  } else if (!read.empty() && read.back() == '\'') {
    read.pop_back();
  }
  reason = reason.substr(0, last) + expected;
  if (read.size() > 24) read = "..." + read.substr(read.size() - 24);
  for (char& c : read) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  return read.empty() ? reason : reason + " (after " + read + ")";
}

}  // namespace

Result<Json> parseJson(const std::string& text, const std::string& file) {
  if (static_cast<std::int64_t>(text.size()) > limits::kMaxJsonBytes) {
    return fail(Error::badInput("JSON document of " + std::to_string(text.size()) + " bytes is larger than the " +
                                    std::to_string(limits::kMaxJsonBytes >> 20) + " MiB colo reads",
                                file));
  }
  if (const auto at = tooDeepAt(text)) {
    return fail(Error::badInput("invalid JSON at " + lineColumn(text, *at + 1) + ": nested deeper than " +
                                    std::to_string(limits::kMaxJsonDepth) + " levels",
                                file));
  }
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    // Parse errors carry a byte offset; out_of_range.406 ("number overflow parsing '1e999'") does not.
    const std::string what = e.what();
    if (const auto* parse = dynamic_cast<const Json::parse_error*>(&e)) {
      return fail(Error::badInput("invalid JSON at " + lineColumn(text, parse->byte) + ": " + parseReason(what), file));
    }
    const auto bracket = what.find("] ");
    return fail(Error::badInput("invalid JSON: " + (bracket == std::string::npos ? what : what.substr(bracket + 2)), file));
  }
}

Result<Json> readJsonFile(const std::string& file) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return fail(Error::io("no such file", file));
  if (std::filesystem::is_directory(file, ec)) return fail(Error::io("is a directory, not a JSON file", file));
  if (std::filesystem::is_regular_file(file, ec)) {
    const auto size = std::filesystem::file_size(file, ec);
    if (!ec && size > static_cast<std::uintmax_t>(limits::kMaxJsonBytes)) {
      return fail(Error::badInput("file of " + std::to_string(size) + " bytes is larger than the " +
                                      std::to_string(limits::kMaxJsonBytes >> 20) + " MiB colo reads",
                                  file));
    }
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) return fail(Error::io("cannot open for reading", file));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return fail(Error::io("read error", file));
  const std::string text = buffer.str();
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
    return fail(Error::badInput("file is empty, expected a JSON object", file));
  }
  return parseJson(text, file);
}

Result<void> writeJsonFileAtomic(const std::string& file, const Json& value) {
  namespace fs = std::filesystem;
  const fs::path target(file);
  const fs::path temp = target.parent_path() / (target.filename().string() + ".tmp." + std::to_string(::getpid()));
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) return fail(Error::io("cannot open for writing", temp.string()));
    out << value.dump(2) << '\n';
    out.flush();
    if (!out) {
      std::error_code ignored;
      fs::remove(temp, ignored);
      return fail(Error::io("write failed (disk full?)", temp.string()));
    }
  }
  std::error_code ec;
  fs::rename(temp, target, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(temp, ignored);
    return fail(Error::io("cannot rename temporary file into place: " + ec.message(), file));
  }
  return {};
}

Result<FormatTag> readFormatTag(const Json& document, const std::string& file) {
  if (!document.is_object()) {
    return fail(Error::badInput("expected a JSON object at the top level, got " + describeJsonValue(document), file));
  }
  const auto it = document.find("format");
  if (it == document.end()) return fail(Error::badInput("missing field \"format\"", file, "/format"));
  if (!it->is_string()) {
    return fail(Error::badInput("must be a string like \"colo.model/1\", got " + describeJsonValue(*it), file,
                                "/format"));
  }
  const std::string tag = it->get<std::string>();
  const auto slash = tag.find('/');
  if (tag.rfind("colo.", 0) != 0 || slash == std::string::npos || slash + 1 >= tag.size()) {
    return fail(Error::badInput("must look like \"colo.<kind>/<version>\", got \"" + tag + "\"", file, "/format"));
  }
  FormatTag out;
  out.kind = tag.substr(5, slash - 5);
  const std::string version = tag.substr(slash + 1);
  if (version.find_first_not_of("0123456789") != std::string::npos || version.size() > 4) {
    return fail(Error::badInput("version must be a whole number, got \"" + tag + "\"", file, "/format"));
  }
  out.version = std::stoi(version);
  return out;
}

Result<void> requireFormat(const Json& document, const std::string& file, const std::string& kind, int version) {
  auto tag = readFormatTag(document, file);
  if (!tag) return fail(tag.error());
  const std::string wanted = "colo." + kind + "/" + std::to_string(version);
  if (tag->kind != kind) {
    return fail(Error::badInput("expected a " + kind + " (" + wanted + "), got a colo." + tag->kind + " document", file,
                                "/format"));
  }
  if (tag->version != version) {
    return fail(Error::badInput("unsupported version " + std::to_string(tag->version) + " of colo." + kind +
                                    " (this colo reads " + wanted + ")",
                                file, "/format"));
  }
  return {};
}

std::string describeJsonValue(const Json& value) {
  // Replace invalid UTF-8 rather than throw: the value may come from anywhere (a database, a mutated file).
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  switch (value.type()) {
    case Json::value_t::object:
      return "an object " + text;
    case Json::value_t::array:
      return "an array " + text;
    case Json::value_t::null:
      return "null";
    default:
      return text;
  }
}

}  // namespace colo
