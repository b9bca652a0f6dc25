#pragma once
/// \file
/// Token files the executor trains on, and the byte-level tokenizer of `colo-run prepare`.
///
/// Formats: a flat little-endian array of uint16 (`.u16`) or uint32 (`.u32`) token ids, or Megatron's
/// indexed dataset (`name.bin` with `name.idx`; the index gives the element type, the documents are read
/// as one concatenated stream). Samples are windows of seq_len + 1 tokens whose start depends only on
/// (seed, step, global sample index), so every plan of a run sees the same global batch.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "colo/core/error.h"

namespace colo::executor {

class TokenData {
 public:
  /// Opens (memory-maps) a token file. Errors: kIo for a missing file, kBadInput naming the file for an
  /// unknown suffix, a size that is not a whole number of tokens, a bad .idx header, or too few tokens.
  [[nodiscard]] static Result<TokenData> open(const std::string& path);
  TokenData(TokenData&&) noexcept;
  TokenData& operator=(TokenData&&) noexcept;
  ~TokenData();

  [[nodiscard]] std::int64_t size() const;         ///< tokens
  [[nodiscard]] int tokenBytes() const;            ///< 1, 2, 4 or 8
  [[nodiscard]] const std::string& path() const;
  [[nodiscard]] std::uint64_t token(std::int64_t index) const;
  /// The largest token id (scanned once, on first call).
  [[nodiscard]] std::uint64_t maxToken() const;

  /// Start of sample `sampleIndex` (0 .. global batch - 1) of optimizer step `step`.
  [[nodiscard]] std::int64_t sampleStart(std::uint64_t seed, std::int64_t step, std::int64_t sampleIndex,
                                         std::int64_t seqLen) const;
  /// seq_len + 1 tokens of one sample (inputs are the first seq_len, labels the last seq_len).
  [[nodiscard]] std::vector<std::int64_t> sample(std::uint64_t seed, std::int64_t step, std::int64_t sampleIndex,
                                                 std::int64_t seqLen) const;

 private:
  struct Impl;
  explicit TokenData(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

struct PrepareReport {
  std::int64_t tokens = 0;
  std::int64_t vocabulary = 256;  ///< byte-level: ids 0..255
};

/// Byte-level tokenizer: every byte of `textFile` becomes one uint16 token (0..255), written to
/// `outFile` (must end in .u16) atomically. Errors: kIo, kBadInput (empty input, wrong suffix).
[[nodiscard]] Result<PrepareReport> prepareTokens(const std::string& textFile, const std::string& outFile);

}  // namespace colo::executor
