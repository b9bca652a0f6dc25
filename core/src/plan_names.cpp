// The names of a plan's enumerations as plan files and command lines spell them, both ways. An unknown
// name is refused with the names that are accepted.
#include "colo/core/plan.h"

#include <algorithm>
#include <optional>

namespace colo {
namespace {

// The first name of a comma-separated list that `add` refuses; nothing when it takes them all.
template <class Add>
std::optional<std::string_view> firstRefused(std::string_view list, Add add) {
  for (std::size_t start = 0; start <= list.size();) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    const std::string_view name = list.substr(start, comma - start);
    if (!add(name)) return name;
    start = comma + 1;
  }
  return std::nullopt;
}

}  // namespace

std::string attentionName(const Execution& x) {
  if (!x.flashAttention) return "unfused";
  return x.flashAttention2 ? "flash2" : "flash";
}

bool setAttention(Execution& x, std::string_view name) {
  if (name != "flash" && name != "flash2" && name != "unfused") return false;
  x.flashAttention = name != "unfused";
  x.flashAttention2 = name == "flash2";
  return true;
}

std::string toString(Schedule value) {
  switch (value) {
    case Schedule::kGpipe: return "gpipe";
    case Schedule::kOneFOneB: return "1f1b";
    case Schedule::kInterleaved: return "interleaved";
    case Schedule::kZeroBubble: return "zb";
  }
  return "1f1b";
}

std::string toString(RecomputePolicy value) {
  switch (value) {
    case RecomputePolicy::kNone: return "none";
    case RecomputePolicy::kSelective: return "selective";
    case RecomputePolicy::kFull: return "full";
    case RecomputePolicy::kOp: return "op";
  }
  return "none";
}

std::string toString(OffloadTarget value) { return value == OffloadTarget::kCpu ? "cpu" : "nvme"; }

std::string toString(CpCommType value) {
  switch (value) {
    case CpCommType::kP2p:
      return "p2p";
    case CpCommType::kAllGather:
      return "all_gather";
    case CpCommType::kAllToAll:
      return "a2a";
    case CpCommType::kA2aP2p:
      return "a2a+p2p";
  }
  return "p2p";
}

std::string cpExchangeLabel(CpCommType type, const std::vector<std::int64_t>& hierarchicalSizes) {
  std::string label = toString(type);
  if (type == CpCommType::kA2aP2p && hierarchicalSizes.size() == 2) {
    label += " " + std::to_string(hierarchicalSizes[0]) + "x" + std::to_string(hierarchicalSizes[1]);
  }
  return label;
}

Result<CpCommType> parseCpCommType(const std::string& name) {
  if (name == "p2p") return CpCommType::kP2p;
  if (name == "all_gather" || name == "allgather") return CpCommType::kAllGather;
  if (name == "a2a" || name == "all_to_all" || name == "alltoall") return CpCommType::kAllToAll;
  if (name == "a2a+p2p") return CpCommType::kA2aP2p;
  return fail(Error::badInput("unknown context-parallel exchange \"" + name + "\" (expected p2p, all_gather, a2a or a2a+p2p)"));
}

std::string toString(TpOverlap value) { return value == TpOverlap::kUserbuffers ? "userbuffers" : "micro_pipeline"; }

Result<TpOverlap> parseTpOverlap(const std::string& name) {
  if (name == "userbuffers") return TpOverlap::kUserbuffers;
  if (name == "micro_pipeline") return TpOverlap::kMicroPipeline;
  return fail(Error::badInput("unknown tensor-parallel overlap \"" + name + "\" (expected userbuffers or micro_pipeline)"));
}

std::string toString(GradAccumulation value) {
  switch (value) {
    case GradAccumulation::kFused: return "fused";
    case GradAccumulation::kMainGrad: return "main_grad";
    case GradAccumulation::kAutograd: return "autograd";
    case GradAccumulation::kFp32Copy: return "fp32_copy";
  }
  return "fused";
}

Result<GradAccumulation> parseGradAccumulation(const std::string& name) {
  for (const GradAccumulation g :
       {GradAccumulation::kFused, GradAccumulation::kMainGrad, GradAccumulation::kAutograd, GradAccumulation::kFp32Copy}) {
    if (toString(g) == name) return g;
  }
  return fail(Error::badInput("unknown gradient accumulation \"" + name +
                              "\" (expected one of: fused, main_grad, autograd, fp32_copy)"));
}

std::string toString(GradSync value) { return value == GradSync::kStep ? "step" : "micro_batch"; }

Result<GradSync> parseGradSync(const std::string& name) {
  if (name == "micro_batch") return GradSync::kMicroBatch;
  if (name == "step") return GradSync::kStep;
  return fail(Error::badInput("unknown gradient sync \"" + name + "\" (expected micro_batch or step)"));
}

std::string toString(MoeDispatcher value) {
  switch (value) {
    case MoeDispatcher::kDeepEp: return "deepep";
    case MoeDispatcher::kHybridEp: return "hybridep";
    case MoeDispatcher::kAllToAll: break;
  }
  return "alltoall";
}

Result<MoeDispatcher> parseMoeDispatcher(const std::string& name) {
  if (name == "alltoall") return MoeDispatcher::kAllToAll;
  if (name == "deepep") return MoeDispatcher::kDeepEp;
  if (name == "hybridep") return MoeDispatcher::kHybridEp;
  return fail(Error::badInput("unknown MoE dispatcher \"" + name + "\" (expected alltoall, deepep or hybridep)"));
}

std::string toString(Float8Recipe value) {
  switch (value) {
    case Float8Recipe::kTensorwise: return "tensorwise";
    case Float8Recipe::kRowwise: return "rowwise";
    case Float8Recipe::kRowwiseGwHp: return "rowwise_with_gw_hp";
    case Float8Recipe::kMxfp8: return "mxfp8";
    case Float8Recipe::kTransformerEngine: break;
  }
  return "transformer_engine";
}

Result<Float8Recipe> parseFloat8Recipe(const std::string& name) {
  for (const Float8Recipe r :
       {Float8Recipe::kTransformerEngine, Float8Recipe::kTensorwise, Float8Recipe::kRowwise, Float8Recipe::kRowwiseGwHp,
        Float8Recipe::kMxfp8}) {
    if (toString(r) == name) return r;
  }
  return fail(Error::badInput("unknown float8 recipe \"" + name +
                              "\" (expected one of: transformer_engine, tensorwise, rowwise, rowwise_with_gw_hp, mxfp8)"));
}

std::vector<std::string> unfusedKernelNames(const UnfusedKernels& u) {
  std::vector<std::string> names;
  if (u.rmsNorm) names.emplace_back("rmsnorm");
  else if (u.eagerFinalNorm()) names.emplace_back("final_rmsnorm");
  if (u.rotary) names.emplace_back("rotary");
  if (u.gatedActivation) names.emplace_back("gated_activation");
  return names;
}

bool addUnfusedKernel(UnfusedKernels& u, std::string_view name) {
  if (name == "rmsnorm") u.rmsNorm = u.finalNorm = true;
  else if (name == "final_rmsnorm") u.finalNorm = true;
  else if (name == "rotary") u.rotary = true;
  else if (name == "gated_activation") u.gatedActivation = true;
  else return false;
  return true;
}

std::string unfusedKernelsLabel(const UnfusedKernels& u) {
  std::string label;
  for (const auto& name : unfusedKernelNames(u)) label += (label.empty() ? "" : "/") + name;
  return label.empty() ? std::string("none") : label;
}

Result<UnfusedKernels> parseUnfusedKernels(std::string_view list) {
  if (list == "all") return UnfusedKernels::all();
  UnfusedKernels u;
  if (list == "none") return u;
  if (const auto name = firstRefused(list, [&](std::string_view n) { return addUnfusedKernel(u, n); })) {
    return fail(Error::badInput("unknown unfused kernel \"" + std::string(*name) +
                                "\" (expected all, none, or a comma-separated list of: rmsnorm, final_rmsnorm, rotary, gated_activation)"));
  }
  return u;
}

std::vector<std::string> recomputeModuleNames(const RecomputeModules& m) {
  std::vector<std::string> names;
  if (m.coreAttn) names.emplace_back("core_attn");
  if (m.moeAct) names.emplace_back("moe_act");
  if (m.layernorm) names.emplace_back("layernorm");
  if (m.mlaUpProj) names.emplace_back("mla_up_proj");
  if (m.mlp) names.emplace_back("mlp");
  if (m.moe) names.emplace_back("moe");
  if (m.sharedExperts) names.emplace_back("shared_experts");
  return names;
}

bool addRecomputeModule(RecomputeModules& m, std::string_view name) {
  if (name == "core_attn") m.coreAttn = true;
  else if (name == "moe_act") m.moeAct = true;
  else if (name == "layernorm") m.layernorm = true;
  else if (name == "mla_up_proj") m.mlaUpProj = true;
  else if (name == "mlp") m.mlp = true;
  else if (name == "moe") m.moe = true;
  else if (name == "shared_experts") m.sharedExperts = true;
  else return false;
  return true;
}

std::string recomputeModulesLabel(const RecomputeModules& m) {
  std::string label;
  for (const auto& name : recomputeModuleNames(m)) label += (label.empty() ? "" : "+") + name;
  return label.empty() ? std::string("none") : label;
}

Result<RecomputeModules> parseRecomputeModules(std::string_view list) {
  RecomputeModules m = RecomputeModules::none();
  if (list == "none") return m;
  if (const auto name = firstRefused(list, [&](std::string_view n) { return addRecomputeModule(m, n); })) {
    return fail(Error::badInput("unknown recompute module \"" + std::string(*name) +
                                "\" (expected none, or a comma-separated list of: core_attn, moe_act, layernorm, "
                                "mla_up_proj, mlp, moe, shared_experts)"));
  }
  return m;
}

std::string toString(Optimizer value) {
  switch (value) {
    case Optimizer::kAdamW: return "adamw";
    case Optimizer::kLamb: return "lamb";
    case Optimizer::kLars: return "lars";
  }
  return "adamw";
}

Result<Optimizer> parseOptimizer(const std::string& name) {
  for (const Optimizer o : {Optimizer::kAdamW, Optimizer::kLamb, Optimizer::kLars}) {
    if (toString(o) == name) return o;
  }
  return fail(Error::badInput("unknown optimizer \"" + name + "\" (expected one of: adamw, lamb, lars)"));
}

int optimizerMoments(Optimizer value) { return value == Optimizer::kLars ? 1 : 2; }

Result<Schedule> parseSchedule(const std::string& name) {
  for (const Schedule s : {Schedule::kGpipe, Schedule::kOneFOneB, Schedule::kInterleaved, Schedule::kZeroBubble}) {
    if (toString(s) == name) return s;
  }
  return fail(Error::badInput("unknown schedule \"" + name + "\" (expected one of: gpipe, 1f1b, interleaved, zb)"));
}

Result<RecomputePolicy> parseRecompute(const std::string& name) {
  for (const RecomputePolicy p :
       {RecomputePolicy::kNone, RecomputePolicy::kSelective, RecomputePolicy::kFull, RecomputePolicy::kOp}) {
    if (toString(p) == name) return p;
  }
  return fail(Error::badInput("unknown recompute policy \"" + name + "\" (expected one of: none, selective, full, op)"));
}

}  // namespace colo
