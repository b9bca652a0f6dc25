// The step of one solution of the operator-level search: pipeline, gradient reduction, optimizer and
// host transfers, and the fullest stage's memory (docs/autoparallel.md, "Assembly" and "Offload").
#include <algorithm>
#include <cmath>

#include "autoparallel_search.h"
#include "colo/costmodel/collectives.h"
#include "colo/costmodel/evaluator.h"

namespace colo::planner::detail {
namespace {

// Per micro-batch figures of one solved block.
struct Figures {
  double seconds = 0, compute = 0, comm = 0, recompute = 0, activation = 0, state = 0, optimizerParams = 0;
  double params = 0;  // held after weight sharding: the gradient buffer's length
  double sync[3] = {0, 0, 0};
};
// `host`: seconds the host needs to issue one kernel or collective. Each way, a block whose device time
// is shorter than its ops' issue time waits for the host (the evaluator's host floor), counted as compute.
Figures figuresOf(const BlockPlan& p, double host) {
  Figures f;
  f.compute = p.computeSeconds;
  f.comm = p.commSeconds;
  f.recompute = p.recomputeSeconds;
  if (host > 0) {
    const double forward = p.forwardSeconds;
    const double backward = p.computeSeconds + p.commSeconds - forward;
    f.compute += std::max(0.0, p.opsForward * host - forward) + std::max(0.0, p.opsRecompute * host - p.recomputeSeconds) +
                 std::max(0.0, p.opsBackward * host - backward);
  }
  f.seconds = f.compute + f.comm + f.recompute;
  f.activation = p.activationBytes;
  f.state = p.stateBytes;
  f.optimizerParams = p.optimizerParams;
  f.params = p.params;
  for (int k = 0; k < 3; ++k) f.sync[k] = p.syncBytes[k];
  return f;
}

}  // namespace

std::vector<std::int64_t> chunkCounts(const std::vector<std::int64_t>& wanted, std::int64_t layers, std::int64_t pp,
                                      std::int64_t microBatches) {
  std::vector<std::int64_t> out;
  for (const auto v : wanted.empty() ? kDefaultChunkCounts : wanted) {
    if (v < 1) continue;
    // Megatron's interleaved schedule: equal chunks, and micro-batches in groups of the stages.
    if (v > 1 && (pp == 1 || layers % (pp * v) != 0 || microBatches % pp != 0)) continue;
    out.push_back(v);
  }
  return out;
}

Assembly assemble(const Context& c, const MeshSolvers& ms, const Solution& sol, std::int64_t pp, std::int64_t microBatches,
                  double alpha, double beta, std::int64_t vpp) {
  const std::int64_t replicas = ms.replicas;
  Assembly a;
  a.alpha = alpha;
  a.beta = beta;
  const double P = static_cast<double>(pp);
  const double M = static_cast<double>(microBatches);
  const double V = static_cast<double>(std::max<std::int64_t>(1, vpp));
  const auto& dev = c.device;
  const double pcie = c.cluster->pcieBytesPerSecond > 0 ? c.cluster->pcieBytesPerSecond : 16e9;
  Figures layers;  // one stage's layers, per micro-batch
  double offloadExposed = 0, offloaded = 0;
  for (std::size_t k = 0; k < c.classes.size(); ++k) {
    const double n = static_cast<double>(c.classes[k].layers.size()) / P;
    const Figures f = figuresOf(sol.layers[k], c.hostSecondsPerOp);
    layers.seconds += n * (f.seconds + sol.backConversion[k]);
    layers.compute += n * f.compute;
    layers.comm += n * (f.comm + sol.backConversion[k]);
    layers.recompute += n * f.recompute;
    layers.activation += n * f.activation;
    layers.state += n * f.state;
    layers.optimizerParams += n * f.optimizerParams;
    layers.params += n * f.params;
    for (int j = 0; j < 3; ++j) layers.sync[j] += n * f.sync[j];
    // Offloaded activations leave during the layer's forward and return before its backward, hidden
    // behind up to 80% of its kernels.
    const double moved = alpha * f.activation;
    offloaded += n * moved;
    offloadExposed += n * std::max(0.0, 2.0 * moved / pcie - 0.8 * f.compute);
  }
  const Figures emb = figuresOf(sol.embedding, c.hostSecondsPerOp);
  const Figures head = figuresOf(sol.head, c.hostSecondsPerOp);
  const double embSeconds = emb.seconds + sol.embeddingConversion;
  // Stage figures: the first stage holds the embedding, the last the head (one stage: both).
  struct Stage {
    double seconds, compute, comm, recompute, activation, headActivation, state, optimizerParams, params, sync[3], copies;
  };
  // Micro-batches whose activations stage i holds at its peak: 1F1B keeps pp - i; the interleaved
  // schedule's warm-up keeps 2(pp - i - 1) + (v - 1)pp + 1 chunk-micro-batches of 1/v of the stage's
  // layers (Megatron's schedule; Korthikanti et al. 2022: pp(1 + (pp - 1)/(pp v)) on the first stage).
  auto inFlight = [&](double i) {
    const double chunks = V == 1.0 ? P - i : (2.0 * (P - i - 1.0) + (V - 1.0) * P + 1.0) / V;
    return std::min(chunks, M);
  };
  auto stage = [&](bool first, bool last) {
    Stage s{};
    s.seconds = layers.seconds + offloadExposed + (first ? embSeconds : 0) + (last ? head.seconds : 0);
    s.compute = layers.compute + (first ? emb.compute : 0) + (last ? head.compute : 0);
    s.comm = layers.comm + (first ? emb.comm + sol.embeddingConversion : 0) + (last ? head.comm : 0);
    s.recompute = layers.recompute + (first ? emb.recompute : 0) + (last ? head.recompute : 0);
    s.activation = layers.activation - offloaded + (first ? emb.activation : 0) + (last ? head.activation : 0);
    s.headActivation = last ? head.activation : 0;  // held for one micro-batch: its backward follows its forward
    s.state = layers.state + (first ? emb.state : 0) + (last ? head.state : 0);
    // (Split over the copies of the mesh already, as the solver priced them.)
    s.optimizerParams = layers.optimizerParams + (first ? emb.optimizerParams : 0) + (last ? head.optimizerParams : 0);
    s.params = layers.params + (first ? emb.params : 0) + (last ? head.params : 0);
    for (int j = 0; j < 3; ++j) s.sync[j] = layers.sync[j] + (first ? emb.sync[j] : 0) + (last ? head.sync[j] : 0);
    s.copies = inFlight(first ? 0.0 : P - 1.0);
    return s;
  };
  std::vector<Stage> stages{stage(true, pp == 1)};
  if (pp > 1) stages.push_back(stage(false, true));
  // Activations and their gradients between stages.
  double hop = 0;
  if (pp > 1) {
    // (A MeshSolvers belongs to one Search, whose context is fixed, and holds one count of replicas: pp is
    // all the hop still depends on.)
    if (const auto memo = ms.hopSeconds.find(pp); memo != ms.hopSeconds.end()) {
      hop = memo->second;
    } else {
      Parallelism par;
      par.tp = ms.mesh->size();
      par.dp = replicas;
      par.pp = pp;
      const auto group = costmodel::placeGroup(*c.cluster, par, costmodel::Dim::kPp);
      const double bytes = static_cast<double>(ms.samples) * static_cast<double>(c.seqLen * c.hidden) * 2.0 /
                           static_cast<double>(ms.mesh->size());
      hop = 2.0 * costmodel::collectiveSeconds(costmodel::Collective::kSendRecv, bytes, group);
      ms.hopSeconds.emplace(pp, hop);
    }
  }
  // A micro-batch crosses a stage boundary once per chunk; the bubble is pp - 1 chunks' time.
  double slowest = 0;
  for (const auto& s : stages) slowest = std::max(slowest, s.seconds + V * hop);
  const Stage& critical = *std::max_element(stages.begin(), stages.end(), [](const Stage& x, const Stage& y) {
    return x.seconds < y.seconds;
  });
  a.compute = M * critical.compute;
  a.comm = M * (critical.comm + V * hop);
  a.recompute = M * critical.recompute;
  a.offload = M * offloadExposed;
  a.bubble = (P - 1.0) * slowest / V;
  const double pipeline = M * slowest + a.bubble;
  // Gradient reductions after the last backward, hidden behind up to 90% of it (as the evaluator's
  // data-parallel tail), the hidden part slowing what it overlaps.
  double tail = 0, peak = 0;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const Stage& s = stages[i];
    auto& memo = ms.lastSync[i];
    const double held = s.params * c.gradientBytes;  // at the width the mesh's reductions use
    const std::array<double, 4> key{s.sync[0], s.sync[1], s.sync[2], replicas > 1 ? held : 0.0};
    if (memo.key != key) {
      memo.key = key;
      memo.seconds = gradientSyncSeconds(*ms.mesh, s.sync, replicas, held);
    }
    const double C = memo.seconds;
    const double cover = 0.9 * (s.seconds * 2.0 / 3.0);
    double exposed = std::max(0.1 * C, C - cover);
    exposed += dev.overlapSlowdown * (C - exposed);
    // The step over the optimizer shard, whose zeroing is the buffer's; the gradient buffer of every held
    // parameter zeroed each step and, when any axis reduces gradients, scaled before it (the evaluator's
    // Megatron buffer, docs/costmodel.md).
    const bool reduced = s.sync[0] + s.sync[1] + s.sync[2] > 0 || replicas > 1;
    const double buffer = s.params * c.gradBufferBytes * (reduced ? 3.0 : 1.0);
    const double onDevice = (s.optimizerParams * (1.0 - beta) * (c.stepBytesPerParam - c.gradBufferBytes) + buffer) /
                            dev.memoryBytesPerSecond;
    const double host = beta * s.optimizerParams;
    const double hostStep = host > 0 ? host / dev.cpuAdamParamsPerSecond + host * 4.0 / pcie : 0.0;
    if (exposed + onDevice + hostStep > tail) {
      tail = exposed + onDevice + hostStep;
      a.sync = exposed;
      a.optimizer = onDevice + hostStep;
    }
    const double state = s.state - beta * s.optimizerParams * 12.0;
    const double acts = s.copies * (s.activation - s.headActivation) + std::min(s.copies, 1.0) * s.headActivation;
    // The caching allocator's fragmentation allowance on activations, as the evaluator counts it.
    double total = state + 1.08 * acts + dev.contextBytes;
    // What goes to host memory must fit there: every GPU of a node offloads alike.
    const double hosted = s.copies * offloaded + beta * s.optimizerParams * 12.0;
    if (hosted > 0 && c.cluster->hostMemoryBytes > 0 &&
        hosted * static_cast<double>(c.cluster->gpusPerNode) > 0.9 * c.cluster->hostMemoryBytes) {
      total = kInf;
    }
    if (total > peak) {
      peak = total;
      a.states = state;
      a.activations = 1.08 * acts;
    }
  }
  a.step = pipeline + tail;
  a.memory = peak;
  return a;
}


}  // namespace colo::planner::detail
