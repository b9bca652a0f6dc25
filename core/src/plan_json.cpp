// colo.plan/1 reading and writing. The embedded model and cluster are full documents of their own
// formats, so a plan file can be re-evaluated or run on another machine with nothing else.
#include "colo/core/plan.h"

#include "colo/core/limits.h"
#include "colo/core/rank_layout.h"
#include "json_reader.h"

namespace colo {
namespace {

using detail::JsonReader;
using detail::LoadFailure;

// Loads an embedded document with the plan's file name and the embedded path prefixed to errors.
template <class T>
T embedded(const JsonReader& r, std::string_view key, Result<T> (*load)(const Json&, const std::string&)) {
  const JsonReader sub = r.object(key);
  auto value = load(sub.json(), r.file());
  if (!value) {
    Error e = value.error();
    e.path = sub.path() + e.path;
    throw LoadFailure{e};
  }
  return std::move(*value);
}

Result<ClusterSpec> clusterDocument(const Json& j, const std::string& file) {
  if (auto format = requireFormat(j, file, "cluster", 1); !format) return fail(format.error());
  return clusterFromJson(j, file);
}

std::optional<double> optionalNumber(const JsonReader& r, std::string_view key) {
  if (!r.has(key)) {
    r.accept({key});
    return std::nullopt;
  }
  return r.number(key);
}

// "tp-cp-dp-pp" as its list of dimensions, innermost first.
std::vector<std::string> splitRankOrder(const std::string& order) {
  std::vector<std::string> dims;
  std::size_t start = 0;
  while (start <= order.size()) {
    const auto dash = order.find('-', start);
    dims.push_back(order.substr(start, dash == std::string::npos ? std::string::npos : dash - start));
    if (dash == std::string::npos) break;
    start = dash + 1;
  }
  return dims;
}

Parallelism readParallel(const JsonReader& par) {
  using limits::kMaxGpus;
  Parallelism out;
  out.dp = par.boundedInteger("dp", 1, kMaxGpus);
  out.tp = par.boundedInteger("tp", 1, kMaxGpus, 1);
  out.pp = par.boundedInteger("pp", 1, kMaxGpus, 1);
  out.cp = par.boundedInteger("cp", 1, kMaxGpus, 1);
  out.ep = par.boundedInteger("ep", 1, kMaxGpus, 1);
  out.etp = par.has("expert_tp") ? par.boundedInteger("expert_tp", 1, kMaxGpus) : 0;
  out.sequenceParallel = par.boolean("sequence_parallel", false);
  out.virtualStages = par.boundedInteger("virtual_stages", 1, limits::kMaxLayers, 1);
  if (par.has("rank_order")) {
    out.rankOrder = splitRankOrder(par.string("rank_order"));
  } else {
    par.accept({"rank_order"});
  }
  par.rejectUnknownKeys();
  return out;
}

// The stages as listed, or, when absent, an even split of the model's layers over the chunks.
std::vector<StagePlan> readStages(const JsonReader& r, const Plan& p) {
  std::vector<StagePlan> out;
  if (!r.has("stages")) {
    r.accept({"stages"});
    const std::int64_t chunks = p.parallel.pp * p.parallel.virtualStages;
    if (p.model.numLayers() % chunks != 0) {
      r.fail("stages", "missing, and the model's " + std::to_string(p.model.numLayers()) +
                           " layers do not split evenly into pp*virtual_stages = " + std::to_string(chunks) +
                           " chunks; list the layers of each chunk");
    }
    return uniformStages(p.model.numLayers(), chunks, RecomputePolicy::kNone);
  }
  for (const auto& s : r.arrayOfObjects("stages")) {
    StagePlan stage;
    stage.layers = s.boundedInteger("layers", 0, limits::kMaxLayers);
    auto policy = parseRecompute(s.string("recompute", "none"));
    if (!policy) s.fail("recompute", policy.error().message);
    stage.recompute = *policy;
    stage.recomputeLayers = s.boundedInteger("recompute_layers", 0, limits::kMaxLayers,
                                             stage.recompute == RecomputePolicy::kNone ? 0 : stage.layers);
    s.rejectUnknownKeys();
    out.push_back(stage);
  }
  return out;
}

Offload readOffload(const JsonReader& o) {
  Offload out;
  out.optimizerFraction = o.fraction("optimizer_fraction", 0.0);
  out.paramsFraction = o.fraction("params_fraction", 0.0);
  out.target = o.choice("target", {"cpu", "nvme"}, "cpu") == "cpu" ? OffloadTarget::kCpu : OffloadTarget::kNvme;
  out.activationLayers = o.nonNegativeInteger("activation_layers", 0);
  o.rejectUnknownKeys();
  return out;
}

// Each choice is read through JsonReader::choice, which refuses any other name, so its parse succeeds.
Execution readExecution(const JsonReader& e) {
  Execution x;
  (void)setAttention(x, e.choice("attention", {"flash", "flash2", "unfused"}, "flash"));
  x.overlapGradReduce = e.boolean("overlap_grad_reduce", true);
  x.overlapParamGather = e.boolean("overlap_param_gather", true);
  x.overlapP2pComm = e.boolean("overlap_p2p_comm", true);
  x.tpCommOverlap = e.boolean("tp_comm_overlap", false);
  if (auto method = parseTpOverlap(e.choice("tp_overlap", {"userbuffers", "micro_pipeline"}, "userbuffers"))) {
    x.tpOverlap = *method;
  }
  if (auto cp = parseCpCommType(e.choice("cp_comm_type", {"p2p", "all_gather", "a2a", "a2a+p2p"}, "p2p"))) x.cpCommType = *cp;
  if (e.has("hierarchical_cp_sizes")) x.hierarchicalCpSizes = e.integerArray("hierarchical_cp_sizes", 1);
  const std::string accumulation = e.choice("grad_accumulation", {"fused", "main_grad", "autograd", "fp32_copy"}, "fused");
  if (auto g = parseGradAccumulation(accumulation)) x.gradAccumulation = *g;
  x.fp32Params = e.boolean("fp32_params", false);
  x.fusedCrossEntropy = e.boolean("fused_cross_entropy", false);
  x.fusedBiasGrad = e.boolean("fused_bias_grad", false);
  x.teGroupedGemm = e.boolean("te_grouped_gemm", false);
  x.gradNanCheck = e.boolean("grad_nan_check", false);
  x.gradReduceBf16 = e.boolean("grad_reduce_in_bf16", false);
  e.accept({"unfused_kernels"});
  if (e.has("unfused_kernels")) {
    const Json& list = e.json().at("unfused_kernels");
    if (!list.is_array()) {
      e.fail("unfused_kernels", "must be an array of op names (rmsnorm, final_rmsnorm, rotary, gated_activation), got " + describeJsonValue(list));
    }
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string at = "unfused_kernels/" + std::to_string(i);
      if (!list[i].is_string()) e.failAt(at, "must be a string, got " + describeJsonValue(list[i]));
      const std::string& name = list[i].get_ref<const std::string&>();
      if (!addUnfusedKernel(x.unfused, name)) {
        e.failAt(at, "unknown op \"" + name + "\" (expected one of: rmsnorm, final_rmsnorm, rotary, gated_activation)");
      }
    }
  }
  e.accept({"recompute_modules"});
  if (e.has("recompute_modules")) {
    const Json& list = e.json().at("recompute_modules");
    if (!list.is_array()) {
      e.fail("recompute_modules", "must be an array of module names (core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, "
                                  "shared_experts), got " + describeJsonValue(list));
    }
    x.recomputeModules = RecomputeModules::none();
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string at = "recompute_modules/" + std::to_string(i);
      if (!list[i].is_string()) e.failAt(at, "must be a string, got " + describeJsonValue(list[i]));
      const std::string& name = list[i].get_ref<const std::string&>();
      if (!addRecomputeModule(x.recomputeModules, name)) {
        e.failAt(at, "unknown module \"" + name + "\" (expected one of: core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, "
                     "shared_experts)");
      }
    }
  }
  x.teDummyWgrads = e.boolean("te_dummy_wgrads", false);
  x.perParameterGathers = e.boolean("per_parameter_gathers", false);
  x.crossEntropyInPlace = e.boolean("cross_entropy_in_place", false);
  x.torchCrossEntropy = e.boolean("torch_cross_entropy", false);
  x.nativeFusedCrossEntropy = e.boolean("native_fused_cross_entropy", false);
  x.fp8OutputProj = e.boolean("fp8_output_proj", false);
  if (auto g = parseGradSync(e.choice("grad_sync", {"micro_batch", "step"}, "micro_batch"))) x.gradSync = *g;
  if (auto d = parseMoeDispatcher(e.choice("moe_dispatcher", {"alltoall", "deepep", "hybridep"}, "alltoall"))) x.moeDispatcher = *d;
  x.epCommOverlap = e.boolean("ep_comm_overlap", false);
  if (auto f = parseFloat8Recipe(e.choice("float8_recipe",
                                          {"transformer_engine", "tensorwise", "rowwise", "rowwise_with_gw_hp", "mxfp8"},
                                          "transformer_engine"))) {
    x.float8Recipe = *f;
  }
  x.quantizedParams = e.boolean("quantized_params", false);
  if (e.has("host_us_per_op")) {
    const double us = e.number("host_us_per_op");
    if (!(us >= 0 && us <= 1e6)) e.fail("host_us_per_op", "must be between 0 and 1e6 microseconds");
    else x.hostMicrosecondsPerOp = us;
  }
  e.rejectUnknownKeys();
  return x;
}

Predictions readPredictions(const JsonReader& pr) {
  Predictions out;
  out.stepTimeSeconds = optionalNumber(pr, "step_time_s");
  out.tokensPerSecond = optionalNumber(pr, "tokens_per_s");
  out.modelTflopsPerGpu = optionalNumber(pr, "model_tflops_per_gpu");
  out.hardwareTflopsPerGpu = optionalNumber(pr, "hardware_tflops_per_gpu");
  out.mfu = optionalNumber(pr, "mfu");
  out.peakMemoryBytes = optionalNumber(pr, "peak_memory_bytes");
  out.bubbleFraction = optionalNumber(pr, "bubble_fraction");
  if (pr.has("fits")) {
    out.fits = pr.boolean("fits");
  } else {
    pr.accept({"fits"});
  }
  if (pr.has("breakdown")) {
    out.breakdown = pr.object("breakdown").json();
  } else {
    pr.accept({"breakdown"});
  }
  pr.rejectUnknownKeys();
  return out;
}

Provenance readProvenance(const JsonReader& pv) {
  Provenance out;
  out.toolVersion = pv.string("tool_version", "");
  out.createdAt = pv.string("created_at", "");
  out.modelHash = pv.string("model_hash", "");
  out.clusterHash = pv.string("cluster_hash", "");
  out.costDbHash = pv.string("costdb_hash", "");
  out.command = pv.string("command", "");
  pv.rejectUnknownKeys();
  return out;
}

// An optional object member: read when present, its default (and the key accepted) when absent.
template <class T>
T optionalObject(const JsonReader& r, std::string_view key, T (*read)(const JsonReader&)) {
  if (!r.has(key)) {
    r.accept({key});
    return T{};
  }
  return read(r.object(key));
}

// A hash that no longer matches means the embedded model or cluster was edited after planning: the
// predictions describe something else. Refuse rather than mislead.
Result<void> checkProvenanceHashes(const Plan& plan, const std::string& file) {
  const auto& pv = plan.provenance;
  if (!pv.modelHash.empty() && pv.modelHash != contentHash(plan.model.toJson())) {
    return fail(Error::badInput("the embedded model was changed after the plan was made (hash " +
                                    contentHash(plan.model.toJson()) + ", recorded " + pv.modelHash +
                                    "); re-plan, or remove provenance.model_hash to accept the edit",
                                file, "/provenance/model_hash"));
  }
  if (!pv.clusterHash.empty() && pv.clusterHash != contentHash(clusterToJson(plan.cluster))) {
    return fail(Error::badInput("the embedded cluster was changed after the plan was made (hash " +
                                    contentHash(clusterToJson(plan.cluster)) + ", recorded " + pv.clusterHash +
                                    "); re-plan, or remove provenance.cluster_hash to accept the edit",
                                file, "/provenance/cluster_hash"));
  }
  return {};
}

}  // namespace

Result<Plan> planFromJson(const Json& document, const std::string& file) {
  auto plan = detail::catchLoad(file, [&]() -> Plan {
    const JsonReader r(document, file);
    r.accept({"format"});
    Plan p;
    p.name = r.string("name", "");
    p.model = embedded<Model>(r, "model", &modelFromJson);
    p.model.file = file;
    p.cluster = embedded<ClusterSpec>(r, "cluster", &clusterDocument);
    p.parallel = readParallel(r.object("parallel"));
    auto schedule = parseSchedule(r.string("schedule", "1f1b"));
    if (!schedule) r.fail("schedule", schedule.error().message);
    p.schedule = *schedule;

    const JsonReader batch = r.object("batch");
    p.microBatchSize = batch.boundedInteger("micro_batch_size", 1, limits::kMaxBatch);
    p.globalBatchSize = batch.boundedInteger("global_batch_size", 1, limits::kMaxBatch);
    p.seqLen = batch.boundedInteger("seq_len", 1, limits::kMaxSeqLen, p.model.defaultSeqLen());
    batch.rejectUnknownKeys();

    p.zeroStage = static_cast<int>(r.boundedInteger("zero_stage", 0, 3, 0));
    auto optimizer = parseOptimizer(r.string("optimizer", "adamw"));
    if (!optimizer) r.fail("optimizer", optimizer.error().message);
    p.optimizer = *optimizer;
    p.offload = optionalObject(r, "offload", &readOffload);
    p.stages = readStages(r, p);
    auto precision = parseDType(r.string("precision", "bf16"));
    if (!precision) r.fail("precision", precision.error().message);
    p.precision = *precision;
    p.execution = optionalObject(r, "execution", &readExecution);
    p.predictions = optionalObject(r, "predictions", &readPredictions);
    p.provenance = optionalObject(r, "provenance", &readProvenance);
    if (r.has("operator_plan")) {
      p.operatorPlan = r.object("operator_plan").json();
    } else {
      r.accept({"operator_plan"});
    }
    r.rejectUnknownKeys();
    return p;
  });
  if (!plan) return plan;
  if (auto valid = validatePlan(*plan, file); !valid) return fail(valid.error());
  if (auto hashes = checkProvenanceHashes(*plan, file); !hashes) return fail(hashes.error());
  return plan;
}

Result<Plan> loadPlan(const std::string& file) {
  auto document = readJsonFile(file);
  if (!document) return fail(document.error());
  if (auto format = requireFormat(*document, file, "plan", 1); !format) return fail(format.error());
  return planFromJson(*document, file);
}

Json planToJson(const Plan& p) {
  Json j;
  j["format"] = "colo.plan/1";
  j["name"] = p.name;
  const std::string order = rankOrderText(p.parallel);
  j["parallel"] = {{"dp", p.parallel.dp},
                   {"tp", p.parallel.tp},
                   {"pp", p.parallel.pp},
                   {"cp", p.parallel.cp},
                   {"ep", p.parallel.ep},
                   {"sequence_parallel", p.parallel.sequenceParallel},
                   {"virtual_stages", p.parallel.virtualStages},
                   {"rank_order", order}};
  if (p.parallel.etp > 0) j["parallel"]["expert_tp"] = p.parallel.etp;  // only when set: older plans keep their hash
  j["schedule"] = toString(p.schedule);
  j["batch"] = {{"micro_batch_size", p.microBatchSize},
                {"global_batch_size", p.globalBatchSize},
                {"seq_len", p.seqLen}};
  j["zero_stage"] = p.zeroStage;
  if (p.optimizer != Optimizer::kAdamW) j["optimizer"] = toString(p.optimizer);  // only when set: older plans keep their hash
  j["offload"] = {{"optimizer_fraction", p.offload.optimizerFraction},
                  {"params_fraction", p.offload.paramsFraction},
                  {"target", toString(p.offload.target)}};
  if (p.offload.activationLayers > 0) j["offload"]["activation_layers"] = p.offload.activationLayers;
  Json stages = Json::array();
  for (const auto& s : p.stages) {
    stages.push_back({{"layers", s.layers}, {"recompute", toString(s.recompute)}, {"recompute_layers", s.recomputeLayers}});
  }
  j["stages"] = stages;
  j["precision"] = toString(p.precision);
  j["execution"] = {{"attention", attentionName(p.execution)},
                    {"overlap_grad_reduce", p.execution.overlapGradReduce},
                    {"overlap_param_gather", p.execution.overlapParamGather},
                    {"tp_comm_overlap", p.execution.tpCommOverlap},
                    {"grad_accumulation", toString(p.execution.gradAccumulation)},
                    {"host_us_per_op", p.execution.hostMicrosecondsPerOp}};
  // Written only when not the default, so that older plans keep their hash.
  if (p.execution.cpCommType != CpCommType::kP2p) j["execution"]["cp_comm_type"] = toString(p.execution.cpCommType);
  if (!p.execution.hierarchicalCpSizes.empty()) j["execution"]["hierarchical_cp_sizes"] = p.execution.hierarchicalCpSizes;
  if (p.execution.tpOverlap != TpOverlap::kUserbuffers) j["execution"]["tp_overlap"] = toString(p.execution.tpOverlap);
  if (p.execution.fp32Params) j["execution"]["fp32_params"] = true;
  if (p.execution.fusedCrossEntropy) j["execution"]["fused_cross_entropy"] = true;
  if (p.execution.fusedBiasGrad) j["execution"]["fused_bias_grad"] = true;
  if (p.execution.teGroupedGemm) j["execution"]["te_grouped_gemm"] = true;
  if (!p.execution.overlapP2pComm) j["execution"]["overlap_p2p_comm"] = false;
  if (p.execution.gradNanCheck) j["execution"]["grad_nan_check"] = true;
  if (p.execution.gradReduceBf16) j["execution"]["grad_reduce_in_bf16"] = true;
  if (p.execution.unfused.any()) j["execution"]["unfused_kernels"] = unfusedKernelNames(p.execution.unfused);
  if (!p.execution.recomputeModules.isDefault()) {
    j["execution"]["recompute_modules"] = recomputeModuleNames(p.execution.recomputeModules);
  }
  if (p.execution.teDummyWgrads) j["execution"]["te_dummy_wgrads"] = true;
  if (p.execution.perParameterGathers) j["execution"]["per_parameter_gathers"] = true;
  if (p.execution.crossEntropyInPlace) j["execution"]["cross_entropy_in_place"] = true;
  if (p.execution.torchCrossEntropy) j["execution"]["torch_cross_entropy"] = true;
  if (p.execution.nativeFusedCrossEntropy) j["execution"]["native_fused_cross_entropy"] = true;
  if (p.execution.fp8OutputProj) j["execution"]["fp8_output_proj"] = true;
  if (p.execution.gradSync != GradSync::kMicroBatch) j["execution"]["grad_sync"] = toString(p.execution.gradSync);
  if (p.execution.moeDispatcher != MoeDispatcher::kAllToAll) j["execution"]["moe_dispatcher"] = toString(p.execution.moeDispatcher);
  if (p.execution.epCommOverlap) j["execution"]["ep_comm_overlap"] = true;
  if (p.execution.float8Recipe != Float8Recipe::kTransformerEngine) j["execution"]["float8_recipe"] = toString(p.execution.float8Recipe);
  if (p.execution.quantizedParams) j["execution"]["quantized_params"] = true;
  Json pred = Json::object();
  const auto& pr = p.predictions;
  auto put = [&](const char* key, const std::optional<double>& v) {
    if (v) pred[key] = *v;
  };
  put("step_time_s", pr.stepTimeSeconds);
  put("tokens_per_s", pr.tokensPerSecond);
  put("model_tflops_per_gpu", pr.modelTflopsPerGpu);
  put("hardware_tflops_per_gpu", pr.hardwareTflopsPerGpu);
  put("mfu", pr.mfu);
  put("peak_memory_bytes", pr.peakMemoryBytes);
  if (pr.fits) pred["fits"] = *pr.fits;
  put("bubble_fraction", pr.bubbleFraction);
  if (!pr.breakdown.empty()) pred["breakdown"] = pr.breakdown;
  j["predictions"] = pred;
  j["provenance"] = {{"tool_version", p.provenance.toolVersion}, {"created_at", p.provenance.createdAt},
                     {"model_hash", p.provenance.modelHash},     {"cluster_hash", p.provenance.clusterHash},
                     {"costdb_hash", p.provenance.costDbHash},   {"command", p.provenance.command}};
  j["model"] = p.model.toJson();
  j["cluster"] = clusterToJson(p.cluster);
  if (!p.operatorPlan.is_null()) j["operator_plan"] = p.operatorPlan;
  return j;
}

}  // namespace colo
