// Shared by the fuzz targets: the input as text or as a temporary file, and the one property every
// reader must have on any input: a value, or an Error that is the user's (exit 2) and names the file.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "colo/core/error.h"

namespace colo::fuzz {

inline std::string text(const std::uint8_t* data, std::size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

/// A fresh folder of this process for files a target writes; emptied on each call.
inline std::filesystem::path scratch() {
  static const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("colo-fuzz-" + std::to_string(::getpid()));
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir, ec);
  return dir;
}

inline void writeFile(const std::filesystem::path& path, const std::uint8_t* data, std::size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

/// Aborts (a finding) unless `error` is a user error (exit 2) whose line names `file`.
inline void requireNamedUserError(const Error& error, const std::string& file) {
  const std::string line = error.toString();
  if (exitCodeFor(error.code) != 2 || line.find(file) == std::string::npos) {
    std::fprintf(stderr, "fuzz: reader error is not a named user error (exit %d): %s\n", exitCodeFor(error.code),
                 line.c_str());
    std::abort();
  }
}

/// Aborts unless reading left nothing beside `file` (no -wal, -shm or -journal).
inline void requireNothingBeside(const std::filesystem::path& file) {
  for (const char* suffix : {"-wal", "-shm", "-journal"}) {
    std::error_code ec;
    if (std::filesystem::exists(file.string() + suffix, ec)) {
      std::fprintf(stderr, "fuzz: reading %s left %s%s beside it\n", file.c_str(), file.c_str(), suffix);
      std::abort();
    }
  }
}

}  // namespace colo::fuzz
