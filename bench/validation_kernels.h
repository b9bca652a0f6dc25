#pragma once
/// \file
/// Kernel-level checks: published microbenchmarks of one small block, predicted from the cost model's
/// own kernel formulas (colo/costmodel/op_cost.h) as the evaluator costs the same kernels inside a
/// layer. A mechanism fitted to such a table (docs/costmodel.md says which) is checked here against the
/// whole table; the training runs it moves are judged apart, by the run rows.
///
/// Files: DATA_DIR/kernels/*.json beside a folder of runs (the shipped ones in
/// data/validation/published/kernels), `colo.kernel-benchmark/1` (data/validation/published/README.md).

#include <cstddef>
#include <string>
#include <vector>

#include "colo/core/error.h"
#include "colo/core/plan.h"
#include "colo/costmodel/op_cost.h"

namespace colo::validation {

/// What a table measured.
enum class KernelBlock {
  /// torchao's float8 benchmark block: LayerNorm -> Linear -> Sigmoid, forward and backward, in bf16
  /// and with the linear in float8; the measured figure is the speedup of float8 over bf16.
  kLayerNormLinearSigmoid,
  /// GEMMs [m, k] x [k, n] alone, `groups` of them at once (an expert layer's), in bf16; the measured
  /// figure is the achieved TFLOP/s. `streams` says how the groups run (0: one grouped kernel; else one
  /// GEMM each over that many streams, Transformer Engine's GroupedLinear).
  kGemm,
  /// One fused attention call (Transformer Engine's DotProductAttention, causal, bf16), forward and
  /// backward; the measured figures are the two passes' times.
  kAttention,
};

/// One measured shape. layernorm_linear_sigmoid: the forward GEMM [m, k] x [k, n] and the measured
/// speedup. gemm: groups x [m, k] x [k, n], the bytes per output element an accumulating GEMM reads and
/// writes (0: none; 8: an fp32 main_grad, 4: a bf16 one), and the measured TFLOP/s. attention: batch,
/// sequence, query and key/value heads, the query/key and value head dims, and the measured seconds of
/// the forward and the backward.
struct KernelPoint {
  double m = 0, k = 0, n = 0;
  double speedup = 0;
  double groups = 1;
  double accumulateBytes = 0;
  double tflops = 0;
  double batch = 0, seq = 0, heads = 0, kvHeads = 0, headDim = 0, valueDim = 0;
  double forwardSeconds = 0, backwardSeconds = 0;
};

/// A measured table, on the GPU of a library cluster.
struct KernelBenchmark {
  std::string id, citation, file;
  std::string cluster;  ///< library cluster whose GPU ran it
  KernelBlock block = KernelBlock::kLayerNormLinearSigmoid;
  Float8Recipe recipe = Float8Recipe::kRowwise;  ///< layernorm_linear_sigmoid only
  int streams = 0;                               ///< gemm only
  std::vector<KernelPoint> points;
};

/// Reads one file. Errors: kBadInput naming the file, field and value.
[[nodiscard]] Result<KernelBenchmark> loadKernelBenchmark(const std::string& file);

/// Every *.json under `folder` (none when the folder does not exist), sorted by file name.
[[nodiscard]] Result<std::vector<KernelBenchmark>> loadKernelBenchmarks(const std::string& folder);

/// layernorm_linear_sigmoid: the block's predicted seconds, forward and backward together.
struct BlockSeconds {
  double bf16 = 0, float8 = 0;
};
[[nodiscard]] Result<BlockSeconds> predictBlock(const KernelBenchmark& bench, const KernelPoint& point);

/// gemm: the predicted seconds of one point, as the evaluator costs it (op_cost.h).
[[nodiscard]] Result<double> predictGemm(const KernelBenchmark& bench, const KernelPoint& point);

/// attention: the predicted forward and backward seconds of one point, as the evaluator costs a fused
/// attention kernel (op_cost.h).
[[nodiscard]] Result<costmodel::FusedAttentionSeconds> predictAttention(const KernelBenchmark& bench, const KernelPoint& point);

/// How the predictions compare with the measurements: speedups (layernorm_linear_sigmoid) or times (gemm;
/// attention, each pass a figure of its own).
struct KernelCheck {
  std::size_t shapes = 0;
  double meanAbsError = 0;  ///< mean of |predicted / measured - 1| (attention: over both passes of every shape)
  double medianSigned = 0;  ///< median of (predicted / measured - 1)
  double sameSide = 0;      ///< layernorm_linear_sigmoid: share of shapes where both say float8 wins (or both loses)
};
[[nodiscard]] Result<KernelCheck> checkKernelBenchmark(const KernelBenchmark& bench);

}  // namespace colo::validation
