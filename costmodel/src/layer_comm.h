#pragma once
// Private: a layer's communication along each parallel dimension, per micro-batch: tensor parallelism's
// all-reduces (or reduce-scatter/all-gather pairs), expert parallelism's dispatch and combine
// all-to-alls, context parallelism's exchanges of keys and values (docs/costmodel.md, "Communication").
// costLayer (layer_pass.cpp) composes them with the layer's kernels.
#include "layer_cost.h"

namespace colo::costmodel::detail {

/// All-gather of one sequence-parallel activation over the tensor-parallel group, as the input of a
/// column-parallel linear's backward: 16 bits, or the saved fp8 copy under Transformer Engine.
[[nodiscard]] double tensorParallelGather(const LayerConfig& config, const GroupPlacement& tpGroup);

/// The output layer's input all-gathered again for its weight gradient: always 16 bits (Megatron's own
/// column-parallel linear, not Transformer Engine's).
[[nodiscard]] double outputLayerGather(const LayerConfig& config, const GroupPlacement& tpGroup);

/// Sets `out.tpCommFwd/Bwd` (exposed seconds) and adds the collectives to `out.opsFwd/Bwd`.
void tensorParallelComm(const LayerTemplate& layer, const LayerConfig& config, const DeviceModel& device,
                        const GroupPlacement& tpGroup, LayerCost& out);

/// Adds to `out.tpCommFwd/Bwd` (and `out.opsFwd/Bwd`) what the vocabulary-split blocks exchange over the
/// tensor-parallel group: the embedding's reduction, the output layer's input gather and input-gradient
/// reduction (its weight-gradient re-gather is matrixProduct's), and the loss's small reductions
/// (docs/costmodel.md, "The embedding's, the output layer's and the loss's collectives").
void vocabParallelComm(const LayerTemplate& block, const LayerConfig& config, const GroupPlacement& tpGroup, LayerCost& out);

/// One expert dispatch (or combine) all-to-all of `bytes` (every token's k copies) over the
/// expert-parallel group, by the plan's dispatcher (docs/costmodel.md, "Expert parallelism").
[[nodiscard]] double expertDispatchSeconds(double bytes, const LayerConfig& config, const GroupPlacement& ep);

/// Sets `out.epCommFwd/Bwd` for an MoE layer under expert parallelism; reads `out.fwd/bwd` (the
/// layer's kernels) for the batch-level overlap.
void expertParallelComm(const LayerTemplate& layer, const LayerConfig& config, const DeviceModel& device,
                        const GroupPlacement& epGroup, LayerCost& out);

/// Adds `out.cpCommFwd/Bwd` under context parallelism, by the plan's exchange; reads `out.attnCoreFwd`
/// (the ring hides its steps behind the attention of the chunk at hand).
void contextParallelComm(const LayerConfig& config, const DeviceModel& device, const GroupPlacement& cpGroup,
                         LayerCost& out);

}  // namespace colo::costmodel::detail
