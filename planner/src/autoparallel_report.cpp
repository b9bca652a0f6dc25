// Megatron's rules as a strategy filter, the per-operator tables of a solved plan, the degree-level plan
// it equals, and the JSON of the results (colo/planner/autoparallel.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <set>

#include "autoparallel_detail.h"
#include "colo/planner/baseline.h"

namespace colo::planner {
namespace detail {
namespace {

Role megatronTpRole(const Unit& unit, bool sp) {
  const Role sequence = sp ? Role::kSeq : Role::kNone;
  switch (unit.kind) {
    case UnitKind::kGemm:
      if (unit.shard == Shard::kColumn || unit.shard == Shard::kHeads || unit.shard == Shard::kVocab) return Role::kOut;
      if (unit.shard == Shard::kRow) return Role::kIn;
      return Role::kNone;
    case UnitKind::kNorm: return sequence;
    case UnitKind::kPointwise:
      if (unit.shard == Shard::kSequence) return sequence;
      if (unit.shard == Shard::kInner || unit.shard == Shard::kHeads || unit.shard == Shard::kExpert) return Role::kOut;
      return Role::kNone;
    case UnitKind::kAttention: return Role::kOut;
    case UnitKind::kMoe: return Role::kInner;
    case UnitKind::kEmbedding: return unit.shard == Shard::kVocab ? Role::kOut : sequence;
    case UnitKind::kLoss: return Role::kOut;
  }
  return Role::kNone;
}

std::string formatSeconds(double s) {
  char buf[32];
  if (s >= 1) std::snprintf(buf, sizeof buf, "%.3f s", s);
  else std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
  return buf;
}

}  // namespace

std::string roleName(Role role) { return role == Role::kNone ? "none" : toString(role); }

bool parseRole(const std::string& name, Role& role) {
  for (const Role r : {Role::kNone, Role::kBatch, Role::kSeq, Role::kOut, Role::kIn, Role::kExpert, Role::kInner, Role::kFsdp}) {
    if (roleName(r) == name) {
      role = r;
      return true;
    }
  }
  return false;
}

std::vector<MegatronRule> megatronRules(int axes) {
  if (axes == 1) return {{0, -1, false}, {0, -1, true}, {-1, 0, false}};
  return {{1, 0, false}, {1, 0, true}, {-1, 2, false}};
}

bool megatronAllows(const MegatronRule& rule, const Unit& unit, const Strategy& s, const DeviceMesh& mesh) {
  for (int a = 0; a < mesh.axes(); ++a) {
    const Role r = s.role[static_cast<std::size_t>(a)];
    if (mesh.axisSize(a) == 1) {
      if (r != Role::kNone) return false;  // one GPU: nothing to split
    } else if (a == rule.cpAxis) {
      if (r != Role::kSeq) return false;
    } else if (a == rule.tpAxis) {
      if (r != megatronTpRole(unit, rule.sequenceParallel)) return false;
    } else if (a == rule.dpAxis || rule.dpAxis == 2) {
      const bool weights = unit.kind == UnitKind::kGemm || unit.kind == UnitKind::kMoe || unit.kind == UnitKind::kEmbedding;
      if (rule.fsdp && weights) {
        if (r != Role::kFsdp) return false;
      } else if (unit.kind == UnitKind::kMoe && rule.expertsOverDp >= 0) {
        if (r != (rule.expertsOverDp == 1 ? Role::kExpert : Role::kBatch)) return false;
      } else if (!(r == Role::kBatch || (unit.kind == UnitKind::kMoe && r == Role::kExpert))) {
        return false;
      }
    } else if (r != Role::kNone) {
      return false;
    }
  }
  return true;
}

std::vector<BlockAssignment> assignments(const std::vector<SolvedBlock>& blocks, const DeviceMesh& mesh,
                                         const SolveWeights& weights, std::int64_t replicas) {
  const double r = static_cast<double>(std::max<std::int64_t>(1, replicas));
  std::vector<BlockAssignment> out;
  const int axes = mesh.axes();
  for (const auto& sb : blocks) {
    const Block& block = sb.solver->block();
    BlockAssignment ba;
    ba.name = sb.name;
    ba.count = sb.count;
    std::vector<Layout> produced(block.units.size());
    double toOffload = sb.offloadedBytes;
    std::vector<double> kept(block.units.size(), 0.0);
    for (std::size_t u = 0; u < block.units.size(); ++u) {
      const Unit& unit = block.units[u];
      const UnitChoice& choice = sb.plan.units[u];
      const Strategy& s = sb.solver->strategies()[u][static_cast<std::size_t>(choice.strategy)];
      produced[u] = s.out;
      UnitAssignment ua;
      ua.unit = unit.name;
      ua.kind = unit.kind == UnitKind::kGemm        ? "gemm"
                : unit.kind == UnitKind::kNorm      ? "norm"
                : unit.kind == UnitKind::kAttention ? "attention"
                : unit.kind == UnitKind::kMoe       ? "moe"
                : unit.kind == UnitKind::kEmbedding ? "embedding"
                : unit.kind == UnitKind::kLoss      ? "loss"
                                                    : "pointwise";
      ua.roles = describeRoles(s, axes);
      ua.input = unit.inputs.empty() ? "-" : toString(s.in, axes);
      ua.output = unit.out.f > 0 ? toString(s.out, axes) : "-";
      std::string comm;
      double seconds = s.fwd + s.bwd + s.commFwd + s.commBwd;
      double activation = choice.recompute ? 0.0 : s.ownSaved;
      for (std::size_t i = 0; i < unit.inputs.size(); ++i) {
        const int p = unit.inputs[i];
        const Layout from = p < 0 ? sb.plan.entry : produced[static_cast<std::size_t>(p)];
        const Conversion& c = sb.solver->conversion(u, i, static_cast<std::size_t>(choice.strategy), from);
        if (!c.steps.empty()) comm += (comm.empty() ? "" : ", ") + c.steps;
        seconds += c.seconds;
        const bool dropped = p >= 0 && sb.plan.units[static_cast<std::size_t>(p)].recompute;
        if (!dropped && s.inputSaved > 0) {
          double bytes = s.inputSaved * sb.solver->inputShare(u, i);
          if (choice.keepBeforeConversion[i]) bytes *= localBytes(from, 1.0, mesh) / localBytes(s.in, 1.0, mesh);
          activation += bytes;
        }
      }
      if (!s.comm.empty()) comm += (comm.empty() ? "" : ", ") + s.comm;
      ua.collectives = comm.empty() ? "-" : comm;
      ua.seconds = seconds;
      ua.activationBytes = activation;
      ua.stateBytes = s.stateParams * (weights.stateBytesPerParam + weights.optimizerBytesPerParam / (s.optimizerShard * r));
      const bool before = std::find(choice.keepBeforeConversion.begin(), choice.keepBeforeConversion.end(), true) !=
                          choice.keepBeforeConversion.end();
      ua.activation = choice.recompute ? (activation > 0 ? "recomputed (inputs kept)" : "recomputed")
                      : activation <= 0 ? "none"
                      : before          ? "kept before conversion"
                                        : "kept";
      kept[u] = activation;
      ua.recompute = choice.recompute;
      for (int a = 0; a < axes; ++a) ua.axisRoles.push_back(roleName(s.role[static_cast<std::size_t>(a)]));
      ua.ops = unit.ops;
      ba.units.push_back(std::move(ua));
    }
    // Offloaded activations: the largest kept tensors first, as much as the block offloads.
    std::vector<std::size_t> order(block.units.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return kept[x] > kept[y]; });
    for (const auto u : order) {
      if (toOffload <= 0 || kept[u] <= 0) break;
      auto& ua = ba.units[u];
      ua.activation = toOffload >= kept[u] * 0.999 ? "offloaded" : "partly offloaded";
      toOffload -= kept[u];
    }
    out.push_back(std::move(ba));
  }
  (void)formatSeconds;
  return out;
}

namespace {

std::string describeRule(const MegatronRule& r) {
  auto axis = [](int a) { return a == 2 ? std::string("both axes") : "axis " + std::to_string(a); };
  std::vector<std::string> parts;
  if (r.tpAxis >= 0) parts.push_back("tp" + std::string(r.sequenceParallel ? "+sp" : "") + " on " + axis(r.tpAxis));
  if (r.cpAxis >= 0) parts.push_back("cp on " + axis(r.cpAxis));
  if (r.dpAxis >= 0) parts.push_back((r.fsdp ? "dp with sharded weights on " : "dp on ") + axis(r.dpAxis));
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

// Why no one of Megatron's rules gives every operator its strategy: the first operator that no rule
// allows, else the first that leaves the rule most operators follow (colo-run applies one rule to all).
std::string leavesMegatronsRules(const std::vector<SolvedBlock>& blocks, const std::vector<MegatronRule>& rules,
                                 const DeviceMesh& mesh) {
  const int axes = mesh.axes();
  auto strategyOf = [](const SolvedBlock& sb, std::size_t u) -> const Strategy& {
    return sb.solver->strategies()[u][static_cast<std::size_t>(sb.plan.units[u].strategy)];
  };
  std::vector<std::size_t> follows(rules.size(), 0);
  for (const auto& sb : blocks) {
    const Block& block = sb.solver->block();
    for (std::size_t u = 0; u < block.units.size(); ++u) {
      bool any = false;
      for (std::size_t r = 0; r < rules.size(); ++r) {
        const bool allowed = megatronAllows(rules[r], block.units[u], strategyOf(sb, u), mesh);
        follows[r] += allowed ? 1 : 0;
        any = any || allowed;
      }
      if (!any) {
        return "simulation-only: " + sb.name + " " + block.units[u].name + " (" + describeRoles(strategyOf(sb, u), axes) +
               ") has no Megatron-style tp/sp/cp/dp equivalent";
      }
    }
  }
  const std::size_t best = static_cast<std::size_t>(std::max_element(follows.begin(), follows.end()) - follows.begin());
  for (const auto& sb : blocks) {
    const Block& block = sb.solver->block();
    for (std::size_t u = 0; u < block.units.size(); ++u) {
      if (megatronAllows(rules[best], block.units[u], strategyOf(sb, u), mesh)) continue;
      return "simulation-only: " + sb.name + " " + block.units[u].name + " (" + describeRoles(strategyOf(sb, u), axes) +
             ") leaves the split the other operators follow (" + describeRule(rules[best]) +
             "); colo-run applies one such split to every operator";
    }
  }
  return "simulation-only: its operators follow no one of Megatron's tp/sp/cp/dp splits";
}

}  // namespace

Equivalent expressAs(const std::vector<SolvedBlock>& blocks, const DeviceMesh& mesh, std::int64_t pp, double activationOffload,
                     double weightOffload, std::int64_t replicas) {
  Equivalent eq;
  auto only = [&eq](std::string why) {
    eq.text = std::move(why);
    return eq;
  };
  const int axes = mesh.axes();
  const MegatronRule* matched = nullptr;
  // Megatron's rules, and each with sharded weights on its data-parallel axis (ZeRO-3).
  auto rules = megatronRules(axes);
  for (auto rule : megatronRules(axes)) {
    if (rule.dpAxis < 0) continue;
    rule.fsdp = true;
    rules.push_back(rule);
  }
  // Megatron's context parallelism: the sequence over the outer axis with tensor parallelism inside, or
  // over one axis with data parallelism on the other, or over a 1-D mesh. (colo-run places its ranks
  // tp, cp, dp from the inside out: the same shards on other GPUs where the mesh puts cp inside dp.)
  if (axes == 1) {
    rules.push_back({-1, -1, false, false, 0});
  } else {
    rules.push_back({1, -1, false, false, 0});
    rules.push_back({1, -1, true, false, 0});
    rules.push_back({-1, 0, false, false, 1});
    rules.push_back({-1, 1, false, false, 0});
  }
  for (const auto& rule : rules) {
    bool all = true;
    for (const auto& sb : blocks) {
      const Block& block = sb.solver->block();
      for (std::size_t u = 0; u < block.units.size() && all; ++u) {
        const Strategy& s = sb.solver->strategies()[u][static_cast<std::size_t>(sb.plan.units[u].strategy)];
        all = megatronAllows(rule, block.units[u], s, mesh);
      }
    }
    if (all) {
      matched = &rule;
      break;
    }
  }
  if (!matched) return only(leavesMegatronsRules(blocks, rules, mesh));
  // Layer-level recompute: each layer block recomputes nothing, everything it can, or attention's core.
  std::string recompute = "none";
  for (const auto& sb : blocks) {
    if (sb.name == "embedding" || sb.name == "head") continue;
    const Block& block = sb.solver->block();
    std::set<std::size_t> recomputed;
    std::size_t attention = 0, candidates = 0;
    for (std::size_t u = 0; u < block.units.size(); ++u) {
      if (sb.plan.units[u].recompute) recomputed.insert(u);
      if (block.units[u].kind == UnitKind::kAttention) attention = u;
      if (u > 0) ++candidates;
    }
    std::string policy;
    if (recomputed.empty()) policy = "none";
    else if (recomputed.size() == 1 && *recomputed.begin() == attention) policy = "selective";
    else if (recomputed.size() + 2 >= candidates) policy = "full";
    else return only("simulation-only: per-operator recompute in " + sb.name + " is not a layer-level policy");
    if (policy != "none") recompute = policy;
  }
  if (activationOffload > 0 || weightOffload > 0) {
    const std::string what = activationOffload > 0 && weightOffload > 0 ? "activations and weights"
                             : activationOffload > 0                    ? "activations"
                                                                        : "weights";
    return only("simulation-only: " + what + " offloaded to host memory (colo-run offloads optimizer states only)");
  }
  if (matched->fsdp && replicas > 1) {
    return only("simulation-only: weights sharded inside each replica and reduced across " + std::to_string(replicas) +
                " replicas (hybrid sharding), where colo-run's ZeRO-3 shards over every data-parallel rank");
  }
  eq.tp = matched->tpAxis >= 0 ? mesh.axisSize(matched->tpAxis) : 1;
  eq.cp = matched->cpAxis >= 0 ? mesh.axisSize(matched->cpAxis) : 1;
  eq.dp = (matched->dpAxis == 2 ? mesh.size() : matched->dpAxis >= 0 ? mesh.axisSize(matched->dpAxis) : 1) * std::max<std::int64_t>(1, replicas);
  // Experts split over the data-parallel axes are Megatron's expert parallelism over those ranks (the
  // copies of the mesh hold the same experts: their data parallelism is the experts' too).
  for (const auto& sb : blocks) {
    const Block& block = sb.solver->block();
    for (std::size_t u = 0; u < block.units.size(); ++u) {
      const Strategy& s = sb.solver->strategies()[u][static_cast<std::size_t>(sb.plan.units[u].strategy)];
      std::int64_t experts = 1;
      for (int a = 0; a < axes; ++a) {
        if (s.role[static_cast<std::size_t>(a)] == Role::kExpert) experts *= mesh.axisSize(a);
      }
      eq.ep = std::max(eq.ep, experts);
    }
  }
  eq.sequenceParallel = matched->sequenceParallel;
  eq.zeroStage = matched->fsdp ? 3 : 1;
  eq.recompute = recompute;
  eq.runnable = true;
  eq.text = "tp=" + std::to_string(eq.tp) + (eq.cp > 1 ? " cp=" + std::to_string(eq.cp) : "") + " dp=" + std::to_string(eq.dp) +
            (eq.ep > 1 ? " ep=" + std::to_string(eq.ep) : "") +
            " pp=" + std::to_string(pp) +
            (matched->sequenceParallel ? " sp" : "") + (matched->fsdp ? " zero3" : "") + ", recompute " + recompute;
  return eq;
}

}  // namespace detail

Json UnitAssignment::toJson() const {
  return {{"unit", unit},         {"kind", kind},           {"roles", roles},
          {"input", input},       {"output", output},       {"collectives", collectives},
          {"seconds", seconds},   {"activation_bytes", activationBytes},
          {"state_bytes", stateBytes}, {"activation", activation}, {"axis_roles", axisRoles},
          {"recompute", recompute},   {"ops", ops}};
}

Json BlockAssignment::toJson() const {
  Json list = Json::array();
  for (const auto& u : units) list.push_back(u.toJson());
  return {{"name", name}, {"count", count}, {"units", list}};
}

Json OperatorPlan::toJson() const {
  Json b = Json::array();
  for (const auto& x : blocks) b.push_back(x.toJson());
  return {{"method", method},
          {"mesh", mesh},
          {"replicas", replicas},
          {"pipeline_stages", pipelineStages},
          {"virtual_stages", virtualStages},
          {"stage_layers", stageLayers},
          {"micro_batch_size", microBatchSize},
          {"micro_batches", microBatches},
          {"step_time_s", stepSeconds},
          {"peak_memory_bytes", peakMemoryBytes},
          {"budget_bytes", budgetBytes},
          {"fits", fits},
          {"activation_offload_fraction", activationOffloadFraction},
          {"optimizer_offload_fraction", optimizerOffloadFraction},
          {"weight_offload_fraction", weightOffloadFraction},
          {"recompute", recompute},
          {"breakdown",
           {{"compute", compute}, {"communication", communication}, {"recompute", recomputeSeconds}, {"bubble", bubble},
            {"gradient_sync", gradientSync}, {"optimizer", optimizer}, {"offload", offload}}},
          {"memory", {{"states", stateBytes}, {"activations", activationBytes}, {"buffers", bufferBytes}, {"context", contextBytes}}},
          {"runnable", runnable},
          {"expressed_as", expressedAs},
          {"degrees", {{"tp", tp}, {"cp", cp}, {"dp", dp}, {"ep", ep}, {"pp", pipelineStages}, {"vpp", virtualStages}, {"sp", sequenceParallel}, {"zero", zeroStage}, {"recompute", recomputePolicy}}},
          {"mesh_shape", meshShape},
          {"memory_price", memoryPrice},
          {"interface", {{"index", interfaceIndex}, {"layout", interfaceLayout}}},
          {"blocks", b}};
}

std::string OperatorPlan::layoutText() const {
  // Layers per stage when they differ ("1,2x62,1"), as colo-plan search writes them.
  const bool uneven = std::adjacent_find(stageLayers.begin(), stageLayers.end(), std::not_equal_to<>()) != stageLayers.end();
  return std::to_string(pipelineStages) + (pipelineStages == 1 ? " stage" : " stages") + " x mesh " + mesh +
         (replicas > 1 ? " x " + std::to_string(replicas) + " replicas" : "") +
         (virtualStages > 1 ? ", " + std::to_string(virtualStages) + " chunks each (interleaved)" : "") +
         (uneven ? ", layers " + stagesSummary(stageLayers) : "");
}

std::string slowerReason(const OperatorPlan& plan, const OperatorPlan& best) {
  const OperatorPlan& a = plan;
  const OperatorPlan& b = best;
  return slowerReason(a.stepSeconds, b.stepSeconds,
                      {{"compute", a.compute - b.compute},
                       {"collectives", a.communication - b.communication},
                       {"recompute", a.recomputeSeconds - b.recomputeSeconds},
                       {"pipeline bubble", a.bubble - b.bubble},
                       {"data-parallel comm", a.gradientSync - b.gradientSync},
                       {"optimizer", a.optimizer - b.optimizer},
                       {"host transfers", a.offload - b.offload}});
}

Json AutoParallelResult::toJson() const {
  return {{"joint", joint.toJson()},
          {"megatron", megatron.toJson()},
          {"megatron_fits", megatronFits},
          {"speedup_over_megatron", megatronFits && joint.stepSeconds > 0 ? Json(megatron.stepSeconds / joint.stepSeconds) : Json(nullptr)},
          {"megatron_slower_by", megatronFits ? Json(slowerReason(megatron, joint)) : Json(nullptr)},
          {"solve_seconds", solveSeconds},
          {"block_solves", blockSolves},
          {"conversions_cached", conversionsCached},
          {"candidates", candidates},
          {"stats", stats.toJson()}};
}

}  // namespace colo::planner
