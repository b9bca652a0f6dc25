#pragma once
/// \file
/// The error value every fallible colo function returns, and the exit codes the programs map it to.

#include <expected>
#include <string>
#include <utility>

namespace colo {

/// What kind of failure an Error is; decides the exit code of the command-line programs.
enum class ErrorCode {
  kBadInput,    ///< the user's input is malformed, inconsistent or impossible (exit 2)
  kIo,          ///< a file could not be read or written (exit 2: the user named it)
  kInfeasible,  ///< valid input, but no plan satisfies the constraints (exit 3 where asked for)
  kInternal,    ///< a bug in colo (exit 1)
};

/// A failure with enough context to act on: which file, where in it (a JSON pointer such as
/// `/layers/3/hidden_size`), and a lower-case message that names the offending value.
struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string file;     ///< path of the file at fault; empty when not about a file
  std::string path;     ///< JSON pointer inside the file; empty when about the whole file
  std::string message;  ///< what is wrong, naming the value, e.g. "must be positive, got -5"

  /// One line for a user: `file: /path: message` with the empty parts left out.
  [[nodiscard]] std::string toString() const;

  /// Shorthands for the common kinds.
  [[nodiscard]] static Error badInput(std::string message, std::string file = {}, std::string path = {});
  [[nodiscard]] static Error io(std::string message, std::string file = {});
  [[nodiscard]] static Error internal(std::string message);
};

/// The result of every fallible function: a value or an Error.
template <class T>
using Result = std::expected<T, Error>;

/// Exit code of the command-line programs for an error kind: bad input and I/O 2, infeasible 3,
/// internal 1.
[[nodiscard]] int exitCodeFor(ErrorCode code);

/// Convenience for returning an error from a function returning Result<T>.
[[nodiscard]] inline std::unexpected<Error> fail(Error error) { return std::unexpected(std::move(error)); }

}  // namespace colo
