#pragma once
/// \file
/// The cost model's entry point: given a model, a cluster and one fully specified plan, predict the
/// step time and the per-GPU memory of every pipeline stage, with a breakdown that sums to the totals.
/// Closed form (microseconds per plan), so the planner can call it for every candidate; the event-level
/// schedule simulation lives in timeline.h.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "colo/core/cluster.h"
#include "colo/core/error.h"
#include "colo/core/json.h"
#include "colo/core/model.h"
#include "colo/core/plan.h"
#include "colo/costmodel/calibration.h"
#include "colo/costmodel/cost_db.h"
#include "colo/costmodel/hardware.h"

namespace colo::costmodel {

/// Per-GPU memory of one pipeline stage, bytes. `total()` is what the GPU must hold at its peak.
struct MemoryBreakdown {
  double weights = 0;
  double gradients = 0;
  double optimizer = 0;       ///< fp32 master weights and Adam moments left on the GPU
  double activations = 0;     ///< saved for backward, all in-flight micro-batches, plus the recompute working set
  double buffers = 0;         ///< communication buffers, logits upcast, ZeRO-3 gathered layers
  double allocator = 0;       ///< caching-allocator fragmentation allowance
  double context = 0;         ///< CUDA context and library workspaces (outside the allocator)
  double host = 0;            ///< offloaded optimizer states, gradients and weights, and offloaded activations (not in total())
  double hostActivations = 0; ///< the part of host that is activation offload's: always host memory, whatever offload.target
  [[nodiscard]] double total() const {
    return weights + gradients + optimizer + activations + buffers + allocator + context;
  }
};

/// Work of one physical pipeline stage, per micro-batch unless said otherwise.
struct StageReport {
  std::int64_t stage = 0;
  std::int64_t layers = 0;            ///< transformer layers over all its chunks
  double forwardSeconds = 0;          ///< compute + exposed TP/CP/EP communication + p2p
  double backwardSeconds = 0;         ///< the same for backward, including recompute
  double recomputeSeconds = 0;        ///< part of backwardSeconds
  double paramsPerGpu = 0;
  double inFlightMicroBatches = 0;    ///< micro-batches whose activations are held at the peak
  double dpExposedSeconds = 0;        ///< per step
  double optimizerSeconds = 0;        ///< per step
  double offloadPcieSeconds = 0;      ///< per step, part of optimizerSeconds: offloaded states' gradients out, weights back
  MemoryBreakdown memory;
};

/// Seconds per step on the critical path; the parts sum to stepSeconds.
struct TimeBreakdown {
  double compute = 0;     ///< forward and backward kernels (without recompute)
  double recompute = 0;
  double tpComm = 0;      ///< exposed tensor-parallel collectives
  double cpComm = 0;      ///< exposed context-parallel ring exchange
  double epComm = 0;      ///< MoE all-to-all
  double ppComm = 0;      ///< pipeline send/recv
  double dpComm = 0;      ///< exposed data-parallel gradient/parameter collectives (and ZeRO-3 gathers)
  double bubble = 0;      ///< pipeline fill and drain
  double gradAccum = 0;   ///< summing each micro-batch's gradients into the accumulated ones (execution.grad_accumulation)
  double offload = 0;     ///< exposed PCIe copies inside the step: offloaded parameters fetched (offload.params_fraction), ZeRO-Offload's per-micro-batch gradient copies
  double optimizer = 0;
};

/// What a cost database changed in the analytic model (the same for every plan of one evaluator).
struct Calibration {
  std::string costDb;                        ///< the database's path; empty without one
  std::string costDbDevice;                  ///< the device of it whose measurements were used; empty: none matched the GPU
  std::vector<LinkFit> links;                ///< link levels whose latency/bandwidth come from measured collectives
  double gemmRooflineScale = 1.0;            ///< measured / roofline over the database's GEMMs, applied to unmeasured ones
  std::int64_t gemmRooflineScalePoints = 0;  ///< GEMMs that scale was fitted on
  double pcieBytesPerSecond = 0;             ///< measured host-device bandwidth (0: the cluster file's figure)
  bool optimizerMeasured = false;            ///< the Adam step is timed from measured adam_step kernels
  [[nodiscard]] Json toJson() const;
};

struct Evaluation {
  double stepSeconds = 0;
  double pipelineSeconds = 0;       ///< forward/backward of all micro-batches through the pipeline
  double tokensPerSecond = 0;
  double modelTflopsPerGpu = 0;     ///< model FLOPs (no recompute) per step / step time / GPUs
  double hardwareTflopsPerGpu = 0;  ///< including recompute
  double mfu = 0;                   ///< model FLOPs utilisation of the precision's peak
  double peakMemoryBytes = 0;       ///< max over stages
  double gpuMemoryBytes = 0;
  /// What offload keeps off the GPUs, per node (the node's GPUs times the largest per-GPU share), in
  /// host memory or, with offload.target nvme, on NVMe; and whether the node holds it (90% of its host
  /// memory: the rest is the system's and the framework's; an unstated host size is not judged).
  double hostBytesPerNode = 0;
  double nvmeBytesPerNode = 0;
  bool hostMemoryFits = true;       ///< hostBytesPerNode in the node's host memory
  bool nvmeFits = true;             ///< nvmeBytesPerNode on the node's NVMe
  bool fitsHost = true;             ///< both
  bool fits = false;                ///< on the GPU and, when offloading, on the host or NVMe
  double bubbleFraction = 0;
  std::int64_t microBatches = 0;
  std::int64_t gemmExact = 0;         ///< GEMM shapes timed from the cost database exactly
  std::int64_t gemmInterpolated = 0;  ///< ... from its nearest measured shape
  std::int64_t gemmRoofline = 0;      ///< ... by the roofline
  std::int64_t kernelsMeasured = 0;   ///< non-GEMM kernels timed from the cost database
  std::int64_t kernelsRoofline = 0;   ///< ... not found there (the bandwidth estimate)
  Calibration calibration;
  TimeBreakdown time;
  std::vector<StageReport> stages;
  /// The figures of `colo-plan evaluate --json`: step_time_s, tokens_per_s, model_tflops_per_gpu,
  /// hardware_tflops_per_gpu, mfu, peak_memory_bytes, fits, bubble_fraction, breakdown.
  [[nodiscard]] Json toJson() const;
};

/// Holds what does not change between plans of one model on one cluster at one sequence length (the
/// op graph digested into per-layer templates), so evaluating a plan costs microseconds.
class Evaluator {
 public:
  /// Errors: kBadInput when the model cannot be expanded at `seqLen`.
  [[nodiscard]] static Result<Evaluator> create(const Model& model, const ClusterSpec& cluster, std::int64_t seqLen);
  /// The same, with what `costDb` holds for the cluster's GPU: measured GEMMs and kernels first (exact,
  /// then nearest shape), the roofline of the rest scaled by its measured error, link levels fitted to
  /// measured collectives, the host-device bandwidth from measured copies, the Adam step from its kernel.
  [[nodiscard]] static Result<Evaluator> create(const Model& model, const ClusterSpec& cluster, std::int64_t seqLen,
                                                const CostDatabase& costDb);
  Evaluator(Evaluator&&) noexcept;
  Evaluator& operator=(Evaluator&&) noexcept;
  ~Evaluator();

  /// Predicts the plan. The plan's model and cluster are not read (the evaluator's are used); its
  /// seq_len must equal the evaluator's. The plan must satisfy validatePlan (not re-checked here, for
  /// speed; evaluatePlan() checks). Errors: kBadInput for a sequence-length mismatch or a precision the
  /// GPU lacks.
  [[nodiscard]] Result<Evaluation> evaluate(const Plan& plan) const;

  /// A GEMM the evaluation of a plan times: [m, k] x [k, n], `count` of them batched.
  struct GemmShape {
    std::int64_t m = 0, n = 0, k = 0, count = 1;
    friend auto operator<=>(const GemmShape&, const GemmShape&) = default;
  };
  /// Every GEMM shape (forward, input gradient, weight gradient) that evaluating `plan` looks up; what
  /// colo-profile measures so the cost database covers the plan exactly. Sorted, without duplicates.
  [[nodiscard]] std::vector<GemmShape> gemmShapes(const Plan& plan) const;

  /// A non-GEMM kernel the evaluation of a plan runs: key (layernorm, softmax, gelu, ...), elements
  /// per GPU, the width it reduces over (0 for elementwise), and the model's hidden size.
  struct KernelShape {
    std::string key;
    std::int64_t elements = 0, width = 0, hidden = 0;
    friend auto operator<=>(const KernelShape&, const KernelShape&) = default;
  };
  /// Every non-GEMM kernel shape evaluating `plan` may look up in a cost database. Sorted, unique.
  [[nodiscard]] std::vector<KernelShape> kernelShapes(const Plan& plan) const;

  /// One op's compute under a plan, per micro-batch and GPU: `block` is "embedding", "layer" (or
  /// "layer class N" when layers differ, e.g. MoE every other layer), "head"; `count` is how many such
  /// blocks the model has. Communication, recompute and the optimizer are not ops (see the breakdown).
  struct OpTime {
    std::string block;
    std::int64_t count = 1;
    std::string op;    ///< the op graph's name without the layer prefix ("attn.qkv")
    std::string kind;  ///< matmul, bmm, softmax, layernorm, ...; flash_attention for the fused kernel
    double forwardSeconds = 0;
    double backwardSeconds = 0;
  };
  /// Every op's forward and backward compute under `plan`, as evaluate() costs them: per stage,
  /// sum(count x forward) over the stage's blocks is its compute forward. Errors as evaluate().
  [[nodiscard]] Result<std::vector<OpTime>> opTimes(const Plan& plan) const;

  [[nodiscard]] const ClusterSpec& cluster() const;
  [[nodiscard]] std::int64_t seqLen() const;
  /// Model FLOPs (GEMMs, forward + backward, no recompute) of one sample.
  [[nodiscard]] double modelFlopsPerSample() const;

 private:
  struct Impl;
  explicit Evaluator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

/// Validates the plan, builds an evaluator for its embedded model and cluster, and evaluates (with
/// measured GEMM times from `costDb` when given).
[[nodiscard]] Result<Evaluation> evaluatePlan(const Plan& plan, const CostDatabase* costDb = nullptr);

/// evaluatePlan's per-op counterpart (Evaluator::opTimes).
[[nodiscard]] Result<std::vector<Evaluator::OpTime>> opTimesOf(const Plan& plan, const CostDatabase* costDb = nullptr);

/// HBM traffic per local parameter of adding one micro-batch's gradients into the accumulated ones,
/// averaged over a step of `microBatches` (docs/costmodel.md).
[[nodiscard]] double gradAccumulationBytes(GradAccumulation mode, DType precision, double microBatches);

/// HBM traffic of one mixed-precision optimizer step per local parameter (fp16 54 B, bf16 42 B,
/// fp32 and fp32 parameters 36 B; docs/costmodel.md), used when the cost database has no measured AdamW step.
[[nodiscard]] double optimizerStepBytes(DType precision, bool fp32Params = false, Optimizer optimizer = Optimizer::kAdamW);
/// Bytes per local parameter of Megatron's main-gradient buffer, which the step zeroes whole (and, with
/// data-parallel ranks, scales whole) instead of the optimizer zeroing its shard; 0 when the plan's
/// gradient accumulation is not Megatron's (fused or main_grad at ZeRO <= 1). docs/costmodel.md.
[[nodiscard]] double gradientBufferBytes(const Plan& plan);
/// The same for AdamW.
[[nodiscard]] double adamStepBytes(DType precision, bool fp32Params = false);

}  // namespace colo::costmodel
