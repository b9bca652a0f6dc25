#include "colo/core/library.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "colo/core/suggest.h"

namespace colo {
namespace {

std::string folder(LibraryKind kind) {
  return kind == LibraryKind::kModels ? "models" : kind == LibraryKind::kClusters ? "clusters" : "costdb";
}
std::string extension(LibraryKind kind) { return kind == LibraryKind::kCostDbs ? ".sqlite" : ".json"; }

}  // namespace

std::string dataDirectory() {
  if (const char* env = std::getenv("COLO_DATA_DIR"); env && *env) return env;
  return COLO_DEFAULT_DATA_DIR;
}

std::vector<std::string> libraryEntries(LibraryKind kind) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  std::error_code ec;
  const fs::path dir = fs::path(dataDirectory()) / folder(kind);
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() == extension(kind)) out.push_back(entry.path().stem().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::string> resolveLibraryFile(LibraryKind kind, const std::string& nameOrPath) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (nameOrPath.empty()) return fail(Error::badInput("empty " + folder(kind) + " name"));
  const std::string ext = extension(kind);
  const bool looksLikePath = nameOrPath.find('/') != std::string::npos ||
                             (nameOrPath.size() > ext.size() && nameOrPath.ends_with(ext));
  if (looksLikePath || fs::is_regular_file(nameOrPath, ec)) return nameOrPath;
  const fs::path entry = fs::path(dataDirectory()) / folder(kind) / (nameOrPath + ext);
  if (fs::is_regular_file(entry, ec)) return entry.string();
  const auto entries = libraryEntries(kind);
  std::string message = "\"" + nameOrPath + "\" is neither a file nor an entry of the " + folder(kind) + " library (" +
                        (fs::path(dataDirectory()) / folder(kind)).string() + ")";
  if (auto close = closestMatch(nameOrPath, entries)) message += "; did you mean \"" + *close + "\"?";
  message += " `colo-plan list " + (kind == LibraryKind::kCostDbs ? std::string("costdbs") : folder(kind)) + "` shows them all";
  return fail(Error::badInput(message));
}

}  // namespace colo
