#include "validation_harness.h"

#include <cmath>

#include "colo/core/library.h"
#include "colo/costmodel/evaluator.h"

namespace colo::validation {
namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::optional<double> number(const Json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<double>();
}

Result<ModelSpec> modelOf(const Json& row, const std::string& id) {
  const Json& m = row["model"];
  const std::string arch = lower(m.value("arch", ""));
  const bool bloom = arch.find("alibi") != std::string::npos;
  auto preset = familyPreset(bloom ? "bloom" : "gpt");
  if (!preset) return fail(preset.error());
  ModelSpec s = *preset;
  s.name = m.value("name", id);
  s.numLayers = m["num_layers"].get<std::int64_t>();
  s.hiddenSize = m["hidden_size"].get<std::int64_t>();
  s.numAttentionHeads = m["num_attention_heads"].get<std::int64_t>();
  s.ffnHiddenSize = m["ffn_hidden_size"].is_number() ? m["ffn_hidden_size"].get<std::int64_t>() : 4 * s.hiddenSize;
  s.seqLen = m["seq_len"].get<std::int64_t>();
  if (m["vocab_size"].is_number()) {
    s.vocabSize = m["vocab_size"].get<std::int64_t>();
  } else {  // a single-layer measurement: no embedding table worth costing, no head
    s.vocabSize = 1;
    s.lmHead = false;
  }
  if (!bloom) s.maxPositionEmbeddings = s.seqLen;
  s.dropout = bloom ? 0.0 : 0.1;
  if (auto valid = validateModelSpec(s, id); !valid) return fail(valid.error());
  return s;
}

}  // namespace

Result<std::vector<Case>> loadCases(const std::string& folder) {
  auto runs = readJsonFile(folder + "/public_runs.json");
  if (!runs) return fail(runs.error());
  auto assumptionsDoc = readJsonFile(folder + "/assumptions.json");
  if (!assumptionsDoc) return fail(assumptionsDoc.error());
  const Json& defaults = (*assumptionsDoc)["defaults"];
  const Json& perRun = (*assumptionsDoc)["runs"];
  std::vector<Case> cases;
  for (const Json& row : *runs) {
    Case c;
    c.id = row["id"].get<std::string>();
    c.citation = row["source"]["citation"].get<std::string>() + ", " + row["source"]["location"].get<std::string>();
    const Json a = perRun.contains(c.id) ? perRun[c.id] : Json::object();
    auto pick = [&](const char* key) -> Json {
      if (a.contains(key)) return a[key];
      if (defaults.contains(key)) return defaults[key];
      return nullptr;
    };
    auto spec = modelOf(row, c.id);
    if (!spec) return fail(spec.error());
    Plan& p = c.plan;
    p.model.source = ModelSource::kSpec;
    p.model.spec = *spec;

    const Json& hw = row["hardware"];
    const Json& par = row["parallel"];
    const Json& tr = row["training"];
    const std::string clusterName = pick("cluster").is_string() ? pick("cluster").get<std::string>() : "dgx-a100-80gb-x128";
    auto clusterFile = resolveLibraryFile(LibraryKind::kClusters, clusterName);
    if (!clusterFile) return fail(clusterFile.error());
    auto cluster = loadCluster(*clusterFile);
    if (!cluster) return fail(cluster.error());
    auto scaled = scaleCluster(*cluster, hw["num_gpus"].get<std::int64_t>());
    if (!scaled) return fail(scaled.error());
    p.cluster = *scaled;
    if (a.contains("network_GBps") && p.cluster.links.size() > 1) p.cluster.links.back().bytesPerSecond = a["network_GBps"].get<double>() * 1e9;
    if (a.contains("gpu_memory_GiB")) p.cluster.gpu.memoryBytes = a["gpu_memory_GiB"].get<double>() * 1024 * 1024 * 1024;

    p.parallel.tp = par["tp"].get<std::int64_t>();
    p.parallel.pp = par["pp"].get<std::int64_t>();
    p.parallel.dp = par["dp"].get<std::int64_t>();
    p.parallel.cp = par.value("cp", 1);
    p.parallel.sequenceParallel = par["sequence_parallel"].is_boolean() && par["sequence_parallel"].get<bool>();
    const Json vpp = par.contains("virtual_pipeline_stages") && par["virtual_pipeline_stages"].is_number()
                         ? par["virtual_pipeline_stages"]
                         : pick("virtual_stages");
    p.parallel.virtualStages = vpp.is_number() ? vpp.get<std::int64_t>() : 1;
    p.schedule = p.parallel.virtualStages > 1 ? Schedule::kInterleaved : Schedule::kOneFOneB;

    const Json mbs = tr["micro_batch_size"].is_number() ? tr["micro_batch_size"] : pick("micro_batch_size");
    p.microBatchSize = mbs.is_number() ? mbs.get<std::int64_t>() : 1;
    p.globalBatchSize = tr["global_batch_size"].is_number() ? tr["global_batch_size"].get<std::int64_t>()
                                                            : p.microBatchSize * p.parallel.dp;
    p.seqLen = spec->seqLen;
    const Json zero = par.contains("zero_stage") && par["zero_stage"].is_number() ? par["zero_stage"] : pick("zero_stage");
    p.zeroStage = zero.is_number() ? zero.get<int>() : 0;

    const std::string recomputeText = lower(tr.value("recompute", "none"));
    RecomputePolicy policy = RecomputePolicy::kNone;
    if (recomputeText.rfind("full", 0) == 0) policy = RecomputePolicy::kFull;
    else if (recomputeText.rfind("selective", 0) == 0) policy = RecomputePolicy::kSelective;
    else if (recomputeText.rfind("none", 0) != 0 && pick("recompute").is_string()) {
      policy = *parseRecompute(pick("recompute").get<std::string>());
    }
    const std::int64_t chunks = p.parallel.pp * p.parallel.virtualStages;
    if (a.contains("stages")) {
      for (const auto& n : a["stages"]) {
        StagePlan st;
        st.layers = n.get<std::int64_t>();
        p.stages.push_back(st);
      }
    } else {
      p.stages = uniformStages(spec->numLayers, chunks, RecomputePolicy::kNone);
    }
    for (auto& st : p.stages) {
      st.recompute = policy;
      st.recomputeLayers = policy == RecomputePolicy::kNone ? 0 : st.layers;
    }
    const std::string precisionText = lower(tr.value("precision", ""));
    if (pick("precision").is_string()) p.precision = *parseDType(pick("precision").get<std::string>());
    else p.precision = precisionText.find("bf16") != std::string::npos ? DType::kBf16 : DType::kFp16;
    if (!p.cluster.gpu.hasPeak(p.precision)) p.precision = DType::kFp16;
    p.execution.flashAttention = pick("attention").is_string() && pick("attention").get<std::string>() == "flash";
    p.execution.overlapGradReduce = pick("overlap_grad_reduce").is_boolean() && pick("overlap_grad_reduce").get<bool>();
    p.execution.overlapParamGather = pick("overlap_param_gather").is_boolean() && pick("overlap_param_gather").get<bool>();
    p.execution.tpCommOverlap = pick("tp_comm_overlap").is_boolean() && pick("tp_comm_overlap").get<bool>();
    c.fullyPublished = !a.contains("micro_batch_size") && !a.contains("virtual_stages") && !a.contains("zero_stage") &&
                       !a.contains("recompute");

    const Json& me = row["measured"];
    const Json& de = row["derived"];
    if (auto f = number(me, "layer_forward_ms")) {
      c.layerOnly = true;
      c.measuredForwardSeconds = *f / 1e3;
      c.measuredBackwardSeconds = *number(me, "layer_backward_ms") / 1e3;
      c.measuredStepSeconds = *c.measuredForwardSeconds + *c.measuredBackwardSeconds;
    } else if (auto t = number(me, "iteration_time_s")) {
      c.measuredStepSeconds = *t;
    } else if (auto ms = number(me, "iteration_time_ms")) {
      c.measuredStepSeconds = *ms / 1e3;
    } else if (auto d = number(de, "iteration_time_s")) {
      c.measuredStepSeconds = *d;
    }
    if (auto mib = number(me, "memory_per_gpu_mib_nvidia_smi")) c.measuredMemoryBytes = *mib * 1024 * 1024;
    if (auto valid = validatePlan(p, c.id); !valid) return fail(valid.error());
    cases.push_back(std::move(c));
  }
  return cases;
}

Result<Outcome> evaluateCase(const Case& c) {
  auto ev = costmodel::evaluatePlan(c.plan);
  if (!ev) return fail(ev.error());
  Outcome o;
  o.source = &c;
  if (c.layerOnly) {
    // One layer: the stage's forward and backward, without the (negligible) embedding lookup.
    o.predictedStepSeconds = ev->stages.front().forwardSeconds + ev->stages.front().backwardSeconds;
  } else {
    o.predictedStepSeconds = ev->stepSeconds;
  }
  o.measuredSeconds = c.measuredStepSeconds.value_or(0);
  o.stepError = o.measuredSeconds > 0 ? (o.predictedStepSeconds - o.measuredSeconds) / o.measuredSeconds : 0;
  if (c.measuredMemoryBytes) {
    o.predictedMemoryBytes = ev->peakMemoryBytes;
    o.memoryError = (ev->peakMemoryBytes - *c.measuredMemoryBytes) / *c.measuredMemoryBytes;
  }
  return o;
}

}  // namespace colo::validation
