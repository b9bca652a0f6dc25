#include "colo/core/error.h"

namespace colo {

std::string Error::toString() const {
  std::string out;
  if (!file.empty()) out += file + ": ";
  if (!path.empty()) out += path + ": ";
  out += message;
  return out;
}

Error Error::badInput(std::string message, std::string file, std::string path) {
  return Error{ErrorCode::kBadInput, std::move(file), std::move(path), std::move(message)};
}

Error Error::io(std::string message, std::string file) {
  return Error{ErrorCode::kIo, std::move(file), {}, std::move(message)};
}

Error Error::internal(std::string message) { return Error{ErrorCode::kInternal, {}, {}, std::move(message)}; }

int exitCodeFor(ErrorCode code) {
  switch (code) {
    case ErrorCode::kBadInput:
    case ErrorCode::kIo:
      return 2;
    case ErrorCode::kInfeasible:
      return 3;
    case ErrorCode::kInternal:
      return 1;
  }
  return 1;
}

}  // namespace colo
