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

namespace colo::validation {

/// One measured shape: the forward GEMM [m, k] x [k, n] and the measured speedup of float8 over bf16.
struct KernelPoint {
  double m = 0, k = 0, n = 0;
  double speedup = 0;
};

/// A LayerNorm -> Linear -> Sigmoid block, forward and backward, in bf16 and with the linear in float8
/// (torchao's float8 benchmark block), measured on the GPU of a library cluster.
struct KernelBenchmark {
  std::string id, citation, file;
  std::string cluster;  ///< library cluster whose GPU ran it
  Float8Recipe recipe = Float8Recipe::kRowwise;
  std::vector<KernelPoint> points;
};

/// Reads one file. Errors: kBadInput naming the file, field and value.
[[nodiscard]] Result<KernelBenchmark> loadKernelBenchmark(const std::string& file);

/// Every *.json under `folder` (none when the folder does not exist), sorted by file name.
[[nodiscard]] Result<std::vector<KernelBenchmark>> loadKernelBenchmarks(const std::string& folder);

/// The block's predicted seconds, forward and backward together.
struct BlockSeconds {
  double bf16 = 0, float8 = 0;
};
[[nodiscard]] Result<BlockSeconds> predictBlock(const KernelBenchmark& bench, const KernelPoint& point);

/// How the predicted speedups compare with the measured ones.
struct KernelCheck {
  std::size_t shapes = 0;
  double meanAbsError = 0;  ///< mean of |predicted speedup / measured - 1|
  double medianSigned = 0;  ///< median of (predicted / measured - 1)
  double sameSide = 0;      ///< share of shapes where both say float8 is faster (or both slower) than bf16
};
[[nodiscard]] Result<KernelCheck> checkKernelBenchmark(const KernelBenchmark& bench);

}  // namespace colo::validation
