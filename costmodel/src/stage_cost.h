#pragma once
// Private: the mechanisms `Evaluator::evaluate` composes, one place each (docs/costmodel.md): the
// communication groups of a plan, the per-micro-batch cost of its model chunks and physical stages, the
// bytes each parameter keeps and moves, a stage's time per micro-batch (with ZeRO-3's gathers and the
// gradient accumulation), its memory by kind, and its data-parallel and optimizer tail.

#include <cstdint>
#include <vector>

#include "colo/core/plan.h"
#include "colo/costmodel/collectives.h"
#include "colo/costmodel/evaluator.h"
#include "colo/costmodel/hardware.h"
#include "layer_cost.h"

namespace colo::costmodel::detail {

/// The plan's communication groups placed on the cluster's link levels.
struct Groups {
  GroupPlacement tp, cp, dp, ep, pp;
  /// dp x cp as one group, placed where dp and cp sit in the rank order: the ranks that hold the same
  /// weights, over which gradients are reduced and ZeRO shards.
  GroupPlacement grad;
  /// The routed experts' counterpart of grad: the ranks holding the same experts (Dim::kExpertData).
  GroupPlacement expertGrad;
};
[[nodiscard]] Groups placeGroups(const ClusterSpec& cluster, const Parallelism& parallel);

/// Device memory NCCL keeps for every communicator of more than one rank (outside the allocator).
[[nodiscard]] double communicatorMemory(const Groups& groups, const DeviceModel& device);

/// One pipeline send/recv of a boundary activation (Megatron's scatter/gather sends 1/tp of it).
[[nodiscard]] double pipelineHopSeconds(const Plan& plan, const ModelTemplates& T, const Groups& groups,
                                        const ClusterSpec& cluster, double activationBytes);

/// One model chunk (consecutive layers of a virtual stage), per micro-batch.
struct ChunkCost {
  double fwd = 0, bwd = 0, recompute = 0;
  double tp = 0, cp = 0, ep = 0;  // exposed comm, both directions
  double commFwd = 0;             // the forward-direction part of tp + cp + ep
  double savedPerMicroBatch = 0;  // activations one micro-batch leaves in this chunk
  double offloaded = 0;           // the part of them activation offload copies to the host
  double largestOffloaded = 0;    // the largest one layer's offloaded activations
  double workingSet = 0;          // recompute working set (one layer's full activations and their gradients)
  double params = 0;
  double expertParams = 0;  // the routed experts' part of params
  double linearWeights = 0, expertLinearWeights = 0;  // LayerCost's linearWeightsPerGpu, summed
  double gatheredTensors = 0;  // parameter tensors ZeRO-3 gathers one by one (execution.per_parameter_gathers)
  double gemmFlopsFwd = 0;
  double recomputeFlops = 0;
  std::uint64_t layerClasses = 0;  // bit c: the chunk holds a layer of class c (classes 63 on share bit 63)
};

/// The costed layers of a model: one cost per layer class, the embedding and the head.
struct CostedLayers {
  std::vector<LayerCost> classes;
  LayerCost embedding;
  LayerCost head;
};

/// Each chunk of `plan.stages` with its layers' compute, communication, saved activations under the
/// chunk's recompute policy, and parameters; the embedding on the first chunk, the head on the last.
[[nodiscard]] std::vector<ChunkCost> costChunks(const Plan& plan, const ModelTemplates& T, const CostedLayers& layers,
                                                const LayerConfig& config, double byteScale);

/// The chunks of physical stage `stage` (c = stage, stage + pp, ...) summed.
struct StageWork {
  double fwd = 0, bwd = 0, rec = 0, tp = 0, cp = 0, ep = 0, commFwd = 0;
  double saved = 0;    // activations per micro-batch
  double offloaded = 0, largestOffloaded = 0;  // activation offload's share of saved (ChunkCost)
  double working = 0;  // the largest recompute working set
  double params = 0, expertParams = 0;
  double linearWeights = 0, expertLinearWeights = 0;
  double gatheredTensors = 0;
  double gemmFlops = 0, recomputeFlops = 0;
  std::int64_t layers = 0;
  std::uint64_t layerClasses = 0;  // ChunkCost::layerClasses of the stage's chunks
};
[[nodiscard]] StageWork sumStage(const std::vector<ChunkCost>& chunks, const Plan& plan, std::int64_t stage);

/// Bytes per parameter the precision and the framework's gradient accumulation imply.
struct StateBytes {
  double weight = 2;        // the stored parameter (fp32 training or execution.fp32_params: 4)
  double gathered = 2;      // a gathered or in-use copy, what all-gathers move (fp32 training: 4)
  double gradient = 4;      // what is reduced: fp32 main_grad under bf16, 16-bit under fp16
  double gradientMemory = 4;  // what is kept (16-bit .grad beside fp32 copies: 6)
  double optimizer = 12;    // fp32 master, Adam m and v (fp32 training or fp32_params: 8)
  double accumulate = 0;    // HBM traffic of summing one micro-batch's gradients
  // Transformer Engine's linear weights under fp8 or fp4 (StageWork::linearWeights): what each element
  // keeps (its 16-bit weight and TE's cached quantized copy, or the quantized weight alone under
  // execution.quantized_params) and what the distributed optimizer's all-gather moves of it. Equal to
  // weight and gathered otherwise.
  double linearWeight = 2;
  double linearGathered = 2;
  // The output layer under fp8_output_proj (MXFP8): a TE linear that Megatron-Core builds outside
  // fp8_model_init, so it keeps its 16-bit weight and, beside it, TE's cached quantized copy, quantized
  // parameters or not: the copy's bytes per element (0 otherwise).
  double headCopy = 0;
};
[[nodiscard]] StateBytes stateBytesOf(const Plan& plan);

/// Whether ZeRO keeps only a shard of the gradients through the step: ZeRO >= 2 with each
/// micro-batch's gradients reduce-scattered into the shard during its backward (execution.grad_sync
/// micro_batch). With grad_sync step they are summed whole and reduce-scattered once, after the stage's
/// last backward, so the peak holds them whole.
[[nodiscard]] bool gradientsSharded(const Plan& plan);
/// Whether ZeRO-3 keeps a pipeline stage's layers gathered from its first forward to its last backward
/// (FSDP2 under PyTorch's pipelining with reshard-after-forward off, torchtitan's default with PP:
/// grad_sync step and pp > 1) instead of gathering each layer before every use.
[[nodiscard]] bool stageStaysGathered(const Plan& plan);

/// A stage's time per micro-batch and its parts.
struct StageTime {
  double forward = 0, backward = 0;  // per micro-batch, with their share of communication
  double total = 0;                  // forward + backward + everything exposed, per micro-batch
  double p2p = 0;
  double sharding = 0;    // ZeRO's collectives inside the step (ZeRO-3 gathers, ZeRO-2 pipeline reduce-scatters), exposed
  double offload = 0;     // offloaded parameters fetched over PCIe before each use, exposed
  double offloadGradients = 0;  // ZeRO-Offload's per-micro-batch gradient copies to and from the host, exposed
  double activationOffload = 0;  // activation offload's copies to the host and back, exposed (forward and backward)
  double accumulate = 0;
};
/// The stage's parameters one GPU holds when ZeRO shards them: expert parameters over the
/// expert-data-parallel ranks (tp x cp x dp / (expert_tp x ep)), the rest over dp x cp.
[[nodiscard]] double shardedParams(const Plan& plan, const StageWork& w);
/// ZeRO-Offload's gradient copies between the GPU and the host partition they accumulate in, per
/// micro-batch, exposed (docs/costmodel.md, "Offload").
[[nodiscard]] double offloadedGradientCopies(const Plan& plan, const StageWork& w, const StateBytes& bytes);
/// Activation offload's copies of the offloaded layers' activations to the host in the forward and back
/// in the backward, per micro-batch, exposed beyond the compute they overlap (docs/costmodel.md,
/// "Activation offload").
struct OffloadPasses {
  double forward = 0, backward = 0;
};
[[nodiscard]] OffloadPasses activationOffloadSeconds(const Plan& plan, const StageWork& w);
/// ZeRO-3's per-layer gathers and reduce-scatters (prefetched behind compute), the gradient
/// accumulation pass and the pipeline hops, added to the stage's work.
[[nodiscard]] StageTime timeStage(const Plan& plan, const StageWork& w, const Groups& groups, const DeviceModel& device,
                                  const StateBytes& bytes, double pipelineHop);

/// Per-GPU memory of a physical stage by kind (docs/costmodel.md, "Memory").
struct StageMemoryInputs {
  const ModelTemplates* templates = nullptr;
  const CostedLayers* layers = nullptr;
  double byteScale = 1;        // the plan's activation bytes / the templates'
  double contextBytes = 0;     // the CUDA context and every communicator's buffers
};
[[nodiscard]] MemoryBreakdown stageMemory(const Plan& plan, const StageWork& w, std::int64_t stage,
                                          const StateBytes& bytes, const StageMemoryInputs& in, double* inFlight);

/// The data-parallel synchronisation (gradient reduction, parameter gather, the tied embedding's
/// all-reduce) exposed after a stage's last backward, and its optimizer step.
struct StageTail {
  double dataParallel = 0;
  double afterNorm = 0;    // part of dataParallel: the updated shards' gather, after the step
  double optimizer = 0;
  double beforeNorm = 0;   // part of optimizer: the passes before the gradient norm's all-reduce
  double offloadPcie = 0;  // part of optimizer
};
/// The rate at which offloaded states reach one GPU: PCIe from host memory; with offload.target nvme the
/// node's NVMe bandwidth shared by its GPUs, at most PCIe (ZeRO-Infinity stages NVMe reads in host memory).
[[nodiscard]] double offloadBytesPerSecond(const Plan& plan, double pcieBytesPerSecond);
/// GPUs of the plan on one node (they share its host memory and NVMe).
[[nodiscard]] double gpusOnNode(const Plan& plan);

struct OptimizerInputs {
  const KernelTable* measuredAdam = nullptr;  // measured adam_step kernels, when the database has them
  double pcieBytesPerSecond = 0;
  double tiedParams = 0;                      // the tied embedding's parameters (0: not tied)
};
[[nodiscard]] StageTail stageTail(const Plan& plan, const StageWork& w, std::int64_t stage, const Groups& groups,
                                  const DeviceModel& device, const StateBytes& bytes, const OptimizerInputs& in);

}  // namespace colo::costmodel::detail
