#pragma once
/// \file
/// The largest values colo accepts in its inputs. They sit far above any real model or cluster (the
/// largest published dense model has 126 layers and a 53,248-wide MLP; the largest clusters have about
/// 100,000 GPUs) and low enough that every product the cost model forms (parameters, FLOPs, bytes,
/// GPUs) stays inside 64-bit integers and every search finishes in seconds. Readers reject a value
/// above its limit with an error naming file, field and value; nothing downstream has to check again.

#include <cstdint>

namespace colo::limits {

/// JSON nesting: deeper documents are refused before they are parsed (colo's formats nest < 10 deep).
inline constexpr int kMaxJsonDepth = 256;
/// Size of a JSON document colo reads (the largest shipped file is under 100 KiB).
inline constexpr std::int64_t kMaxJsonBytes = 64LL << 20;
/// Integers in JSON: the range a double holds exactly (2^53), so that no value depends on how it was
/// written (1e3 or 1000).
inline constexpr std::int64_t kMaxJsonInteger = 1LL << 53;

inline constexpr std::int64_t kMaxLayers = 1024;
inline constexpr std::int64_t kMaxWidth = 1 << 20;       ///< hidden, MLP, embedding and head widths
inline constexpr std::int64_t kMaxHeads = 1 << 12;       ///< attention heads and key/value groups
inline constexpr std::int64_t kMaxVocab = 1 << 24;       ///< vocabulary, type vocabulary, classes
inline constexpr std::int64_t kMaxSeqLen = 1 << 20;      ///< tokens per sample, position table
inline constexpr std::int64_t kMaxExperts = 1024;
inline constexpr std::int64_t kMaxImageSize = 1 << 14;   ///< pixels per side
inline constexpr std::int64_t kMaxChannels = 1024;
inline constexpr std::int64_t kMaxParameters = 1LL << 50;  ///< about 10^15 parameters
inline constexpr std::int64_t kMaxGpus = 1 << 20;          ///< GPUs in a cluster (and any degree)
inline constexpr std::int64_t kMaxBatch = 1 << 24;         ///< samples in a micro or global batch
inline constexpr std::int64_t kMaxMicroBatchTokens = 1 << 24;  ///< micro_batch_size x seq_len
inline constexpr std::int64_t kMaxOps = 1 << 20;           ///< operators of a raw op graph
/// Any number in a colo file (GiB, GB/s, TFLOP/s, FLOPs, seconds): products of a few such numbers stay
/// finite in a double.
inline constexpr double kMaxQuantity = 1e30;

}  // namespace colo::limits
