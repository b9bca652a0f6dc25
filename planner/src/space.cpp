// The rules of the plan space the degree-level search, the operator-level search and the baselines share
// (colo/planner/space.h).
#include "colo/planner/space.h"

#include <algorithm>

#include "colo/planner/autoparallel.h"

namespace colo::planner {

const char* stagesRule(std::int64_t layers, std::int64_t pp) { return layers < pp ? "more stages than layers" : nullptr; }

const char* chunksRule(std::int64_t layers, std::int64_t pp, std::int64_t chunks) {
  if (chunks > 1 && (pp == 1 || layers % (pp * chunks) != 0)) return "virtual stages need pp > 1 and layers divisible by pp*vpp";
  return nullptr;
}

const char* interleavedBatchRule(std::int64_t microBatches, std::int64_t pp, std::int64_t chunks) {
  if (chunks > 1 && microBatches % pp != 0) return "interleaving needs micro-batches divisible by pp";
  return nullptr;
}

const char* headsRule(std::int64_t heads, std::int64_t kvHeads, std::int64_t tp) {
  if (heads > 0 && (heads % tp != 0 || (kvHeads > 0 && kvHeads % tp != 0))) return "heads or kv heads not divisible by tp";
  return nullptr;
}

std::vector<std::int64_t> chunkCounts(const std::vector<std::int64_t>& wanted, std::int64_t layers, std::int64_t pp,
                                      std::int64_t microBatches) {
  std::vector<std::int64_t> out;
  for (const auto v : wanted.empty() ? kChunkCounts : wanted) {
    if (v < 1 || chunksRule(layers, pp, v) || interleavedBatchRule(microBatches, pp, v)) continue;
    out.push_back(v);
  }
  return out;
}

std::string outsideOperatorSpace(const Plan& p) {
  std::vector<std::string> why;
  const auto& q = p.parallel;
  // (Its ranks are tp innermost, then cp: the mesh cp x tp, copied dp times.)
  if (q.cp > 1 && q.tp > 1 && q.dp > 1 && !searchesReplicas(p.cluster, q.pp, {q.cp, q.tp}, q.dp)) {
    why.push_back("context parallelism beside tensor and data parallelism on a mesh of tp x cp that the search does not copy "
                  "(copies of meshes of 2 to 8 whole nodes with a node inside, on 32 nodes or more; --replicas asks for others)");
  }
  if (std::find(kChunkCounts.begin(), kChunkCounts.end(), q.virtualStages) == kChunkCounts.end()) {
    std::string tried;  // "2, 3, 4, 6 and 8"
    for (std::size_t i = 1; i < kChunkCounts.size(); ++i) {
      tried += (i == 1 ? "" : i + 1 == kChunkCounts.size() ? " and " : ", ") + std::to_string(kChunkCounts[i]);
    }
    why.push_back(std::to_string(q.virtualStages) + " chunks per stage (the operator-level search tries " + tried + ")");
  }
  if (p.schedule == Schedule::kGpipe) why.push_back("the GPipe schedule");
  if (p.schedule == Schedule::kZeroBubble) why.push_back("the zero-bubble schedule");
  if (p.zeroStage == 2) why.push_back("ZeRO-2");
  if (q.ep > 1 && q.expertTp() != q.tp) why.push_back("experts folded over other ranks (expert_tp != tp)");
  std::string out;
  for (const auto& w : why) out += (out.empty() ? "" : ", ") + w;
  return out;
}

}  // namespace colo::planner
