#pragma once
/// \file
/// Measures what the cost model looks up, on the hardware at hand, through LibTorch: the GEMM shapes
/// a model's plans run (forward, input and weight gradients), common non-GEMM kernels, and a whole
/// model's forward + backward step to check the cost model against. No LibTorch type appears here.

#include <cstdint>
#include <string>
#include <vector>

#include "colo/core/error.h"
#include "colo/core/model.h"
#include "colo/core/progress.h"
#include "colo/costmodel/cost_db.h"

namespace colo::profiler {

/// What to profile.
struct ProfileOptions {
  std::vector<std::int64_t> tensorParallel{1};  ///< tp degrees whose shard shapes to measure
  std::vector<std::int64_t> microBatches{1};    ///< micro-batch sizes to measure
  std::int64_t seqLen = 0;                      ///< 0: the model's default
  DType dtype = DType::kFp32;
  std::string device = "cpu";                   ///< cpu or cuda
  bool resume = false;                          ///< skip shapes already in the database
  int warmup = 2;
  int repetitions = 7;
  int batchRows = 8;                            ///< measurements per database transaction
  int threads = 0;                              ///< LibTorch intra-op threads (0: its default); match a rank's share
};

struct ProfileReport {
  std::string deviceName;
  std::int64_t shapes = 0;     ///< distinct GEMM shapes the plans need
  std::int64_t measured = 0;
  std::int64_t skipped = 0;    ///< GEMM shapes already in the database (--resume)
  std::int64_t kernels = 0;    ///< non-GEMM kernels measured (including the optimizer step)
  std::int64_t kernelsSkipped = 0;  ///< non-GEMM kernels already in the database (--resume)
  std::int64_t copies = 0;     ///< host-device copies measured (CUDA devices only)
  double seconds = 0;
  bool cancelled = false;
};

/// The device's name as stored in the database ("cpu: <model name>" or the CUDA device name) and its
/// fingerprint (library versions, threads). Errors: kBadInput for an unknown or absent device.
[[nodiscard]] Result<std::string> deviceName(const std::string& device);
[[nodiscard]] std::string deviceFingerprint(const std::string& device);

/// Median and spread (half the inter-quartile range) of one kernel, seconds.
struct Timing {
  double median = 0;
  double spread = 0;
  int repetitions = 0;
};

/// Times `count` batched [m, k] x [k, n] GEMMs, per GEMM. Inputs rotate through several buffers so caches
/// do not flatter. Errors: kBadInput for an unsupported dtype or device, kInternal for a LibTorch error.
[[nodiscard]] Result<Timing> timeGemm(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t count, DType dtype,
                                      const std::string& device, int warmup, int repetitions);

/// Measures the GEMM shapes the model's plans need (per tp and micro-batch) and a few non-GEMM kernels,
/// writing each batch of measurements in one transaction. Interrupting leaves every completed batch.
[[nodiscard]] Result<ProfileReport> profileModel(const Model& model, costmodel::CostDatabase& db, const ProfileOptions& options,
                                                 ProgressSink* progress = nullptr, const CancellationToken* cancel = nullptr);

/// Forward + backward of the whole model (embedding, layers, head, loss) in LibTorch at (seq, batch), the
/// median of `repetitions` steps after `warmup`. Decoder models of the gpt and llama families.
[[nodiscard]] Result<Timing> timeModelStep(const ModelSpec& spec, std::int64_t seqLen, std::int64_t batch, DType dtype,
                                           const std::string& device, int warmup, int repetitions);

}  // namespace colo::profiler
