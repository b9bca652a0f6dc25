// Colossal-AI's HybridParallelPlugin call (Python source) and torchtitan's job TOML, read into colo
// plans (import.h).
#include <cstdlib>
#include <map>
#include <regex>
#include <sstream>

#include "colo/core/library.h"
#include "colo/core/number_list.h"
#include "colo/planner/export_check.h"
#include "colo/planner/import.h"
#include "import_common.h"

namespace colo::planner {

using detail::kMaxDegree;
using detail::kMaxLaunchInteger;

namespace {

// ---- Python keyword arguments and TOML (the subsets these launches use) -------------------------

// TOML tables of scalar keys: section.key -> value text (basic and literal strings unquoted; arrays kept
// as written).
Result<std::map<std::string, std::string>> tomlScalars(const std::string& text) {
  std::map<std::string, std::string> out;
  std::string section;
  std::istringstream in(text);
  int lineNumber = 0;
  for (std::string line; std::getline(in, line);) {
    ++lineNumber;
    char quote = 0;  // inside a basic ("...") or literal ('...') string: no comment starts there
    for (std::size_t i = 0; i < line.size(); ++i) {
      if ((line[i] == '"' || line[i] == '\'') && (quote == 0 || quote == line[i])) quote = quote == 0 ? line[i] : 0;
      if (line[i] == '#' && quote == 0) {
        line.resize(i);
        break;
      }
    }
    line.erase(0, line.find_first_not_of(" \t\r"));
    line.erase(line.find_last_not_of(" \t\r") + 1);
    if (line.empty()) continue;
    if (line.front() == '[') {
      if (line.back() != ']') return fail(Error::badInput("line " + std::to_string(lineNumber) + ": unclosed table header"));
      section = line.substr(1, line.size() - 2);
      continue;
    }
    const auto eq = line.find('=');
    if (eq == std::string::npos) return fail(Error::badInput("line " + std::to_string(lineNumber) + ": expected key = value"));
    std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    key.erase(key.find_last_not_of(" \t") + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') && value.back() == value.front()) {
      value = value.substr(1, value.size() - 2);
    }
    out[section.empty() ? key : section + "." + key] = value;
  }
  return out;
}

Result<std::int64_t> integerValue(const std::map<std::string, std::string>& kv, const std::string& key, std::int64_t fallback,
                                  std::int64_t minimum = 0, std::int64_t maximum = kMaxLaunchInteger) {
  const auto it = kv.find(key);
  if (it == kv.end()) return fallback;
  char* end = nullptr;
  const long long n = std::strtoll(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != '\0' || n < minimum || n > maximum) {
    return fail(Error::badInput(key + ": expected an integer from " + std::to_string(minimum) + " to " + std::to_string(maximum) +
                                ", got \"" + it->second + "\""));
  }
  return static_cast<std::int64_t>(n);
}

Result<Plan> finish(Plan p, const std::string& origin) {
  p.name = p.model.name() + " (imported from " + origin + ")";
  if (auto valid = validatePlan(p); !valid) return fail(valid.error());
  return p;
}

}  // namespace

Result<Plan> importColossalAi(const std::string& source, const ImportContext& context) {
  if (!context.model) return fail(Error::badInput("a Colossal-AI plugin does not name the model: pass --model"));
  const auto open = source.find("HybridParallelPlugin(");
  if (open == std::string::npos) return fail(Error::badInput("no HybridParallelPlugin(...) call found"));
  std::size_t close = open + std::string("HybridParallelPlugin(").size();
  for (int depth = 1; close < source.size() && depth > 0; ++close) {
    if (source[close] == '(') ++depth;
    if (source[close] == ')') --depth;
  }
  auto kw = pythonKeywordArguments(source.substr(open + 21, close - open - 22));
  Plan p;
  p.model = *context.model;
  p.cluster = context.cluster;
  auto& q = p.parallel;
  COLO_TRY(tp, integerValue(kw, "tp_size", 1, 1, kMaxDegree));
  COLO_TRY(pp, integerValue(kw, "pp_size", 1, 1, kMaxDegree));
  COLO_TRY(sp, integerValue(kw, "sp_size", 1, 1, kMaxDegree));
  COLO_TRY(ep, integerValue(kw, "ep_size", 1, 1, kMaxDegree));
  const std::string mode = kw.contains("sequence_parallelism_mode") ? kw.at("sequence_parallelism_mode") : "";
  q.tp = tp;
  q.pp = pp;
  q.ep = ep;
  // Ring attention and all-to-all modes split the sequence (colo's cp); split_gather is Megatron's SP.
  if (sp > 1 && (mode == "ring_attn" || mode == "all_to_all" || mode == "ring")) {
    q.cp = sp;
    p.execution.cpCommType = mode == "all_to_all" ? CpCommType::kAllToAll : CpCommType::kP2p;
  }
  q.sequenceParallel = kw.contains("enable_sequence_parallelism") && kw.at("enable_sequence_parallelism") == "True" && tp > 1;
  const std::int64_t world = p.cluster.totalGpus();
  if (world % (q.tp * q.pp * q.cp) != 0) {
    return fail(Error::badInput("the cluster's " + std::to_string(world) + " GPUs are not a multiple of tp_size x pp_size x sp_size"));
  }
  q.dp = world / (q.tp * q.pp * q.cp);
  COLO_TRY(zero, integerValue(kw, "zero_stage", 0));
  p.zeroStage = zero;
  const std::string precision = kw.contains("precision") ? kw.at("precision") : "fp16";
  auto dtype = parseDType(precision);
  if (!dtype) return fail(Error::badInput("precision: " + dtype.error().message));
  p.precision = *dtype;
  // enable_all_optimization turns flash attention on too (ShardConfig._turn_on_all_optimization).
  auto isTrue = [&](const char* key) { return kw.contains(key) && kw.at(key) == "True"; };
  p.execution.flashAttention = isTrue("enable_flash_attention") || isTrue("enable_all_optimization");
  if (kw.contains("cpu_offload") && kw.at("cpu_offload") == "True") p.offload.optimizerFraction = 1.0;
  // The batch: colo's export writes "# micro-batch M, global batch G, sequence S"; else the context.
  std::int64_t gbs = context.globalBatchSize, seq = context.seqLen, mbsComment = 0;
  std::smatch m;
  if (std::regex_search(source, m, std::regex(R"(#\s*micro-batch (\d{1,8}), global batch (\d{1,8}), sequence (\d{1,8}))"))) {
    mbsComment = std::stoll(m[1]);
    if (gbs == 0) gbs = std::stoll(m[2]);
    if (seq == 0) seq = std::stoll(m[3]);
  }
  if (gbs == 0) return fail(Error::badInput("the plugin does not state the global batch: pass --gbs"));
  p.globalBatchSize = gbs;
  p.seqLen = seq > 0 ? seq : p.model.defaultSeqLen();
  // None is the plugin's own default for both (the other of the two then decides).
  for (const char* key : {"microbatch_size", "num_microbatches"}) {
    if (kw.contains(key) && kw.at(key) == "None") kw.erase(key);
  }
  COLO_TRY(micro, integerValue(kw, "microbatch_size", mbsComment));
  COLO_TRY(numMicro, integerValue(kw, "num_microbatches", 0));
  p.microBatchSize = micro > 0 ? micro : numMicro > 0 ? gbs / (q.dp * numMicro) : 1;
  const std::string style = kw.contains("pp_style") ? kw.at("pp_style") : "1f1b";
  COLO_TRY(chunks, integerValue(kw, "num_model_chunks", 1, 1, kMaxDegree));
  q.virtualStages = style == "interleaved" ? chunks : 1;
  p.schedule = style == "interleaved" ? Schedule::kInterleaved : style == "zbv" ? Schedule::kZeroBubble : Schedule::kOneFOneB;
  RecomputePolicy policy = RecomputePolicy::kNone;
  std::int64_t perStage = 0;
  if (std::regex_search(source, m, std::regex(R"(gradient checkpointing: (\w+) on up to (\d{1,8}) layers)"))) {
    auto parsed = parseRecompute(m[1]);
    if (parsed) policy = *parsed;
    perStage = std::stoll(m[2]);
  } else if (source.find("gradient_checkpointing_enable()") != std::string::npos) {
    policy = RecomputePolicy::kFull;  // Hugging Face checkpointing recomputes whole layers
  }
  p.stages = uniformStages(p.model.numLayers(), q.pp * q.virtualStages, policy);
  if (kw.contains("num_layers_per_stage") && kw.at("num_layers_per_stage") != "None") {
    // One count per stage, as Colossal-AI's PipelineStageManager asserts (pp_size of them, summing to the layers).
    std::string list = kw.at("num_layers_per_stage");
    if (list.size() >= 2 && list.front() == '[' && list.back() == ']') list = list.substr(1, list.size() - 2);
    auto counts = parsePositiveIntegerList(list, p.model.numLayers());
    std::int64_t sum = 0;
    for (const auto c : counts ? *counts : std::vector<std::int64_t>{}) sum += c;
    if (!counts || static_cast<std::int64_t>(counts->size()) != q.pp || q.virtualStages != 1 || sum != p.model.numLayers()) {
      return fail(Error::badInput("num_layers_per_stage=" + kw.at("num_layers_per_stage") + ": expected pp_size " + std::to_string(q.pp) +
                                  " layer counts summing to the model's " + std::to_string(p.model.numLayers()) +
                                  " layers (one per stage; not with pp_style interleaved)"));
    }
    p.stages.clear();
    for (const auto c : *counts) p.stages.push_back({c, policy, 0});
  }
  for (auto& st : p.stages) st.recomputeLayers = policy == RecomputePolicy::kNone ? 0 : perStage > 0 ? std::min(perStage, st.layers) : st.layers;
  return finish(p, "a Colossal-AI plugin");
}

namespace {

// ---- torchtitan's job TOML ------------------------------------------------------------------------
//
// torchtitan renamed its keys twice; a TOML of any of these layouts reads the same (torchtitan's
// config_manager.py at each date):
// - until 2025-03-18: training.{data_parallel_*_degree, tensor_parallel_degree},
//   experimental.{pipeline_parallel_*, context_parallel_*, enable_async_tensor_parallel}, with
//   pipeline_parallel_microbatches a count of micro-batches (default: the pipeline degree);
// - from 2025-03-18 (PR 980) the same under parallelism.*; from 2025-04-07 (PR 1073) the micro-batch
//   count gave way to parallelism.pipeline_parallel_microbatch_size (default 1);
// - the local batch is training.batch_size until 2025-06-05 (PR 1238), training.local_batch_size after;
// - float8: float8.enable_float8_linear until 2025-02-15 (PR 823), then model.converters = ["float8"].

using Toml = std::map<std::string, std::string>;

// The first of `keys` the TOML sets (newest layout first), else the first of them (absent: the default).
std::string tomlKey(const Toml& kv, std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    if (kv.contains(k)) return k;
  }
  return *keys.begin();
}

bool tomlTrue(const Toml& kv, const std::string& key) { return kv.contains(key) && kv.at(key) == "true"; }

// The mesh: tp, pp, cp, ep and the data-parallel replicate x shard degrees (FSDP2, ZeRO-3, over shard).
Result<void> readTorchtitanMesh(const Toml& kv, Plan& p) {
  auto& q = p.parallel;
  COLO_TRY(tp, integerValue(kv, tomlKey(kv, {"parallelism.tensor_parallel_degree", "training.tensor_parallel_degree"}), 1, 1, kMaxDegree));
  COLO_TRY(pp, integerValue(kv, tomlKey(kv, {"parallelism.pipeline_parallel_degree", "experimental.pipeline_parallel_degree"}), 1, 1,
                            kMaxDegree));
  COLO_TRY(cp, integerValue(kv, tomlKey(kv, {"parallelism.context_parallel_degree", "experimental.context_parallel_degree"}), 1, 1,
                            kMaxDegree));
  COLO_TRY(ep, integerValue(kv, "parallelism.expert_parallel_degree", 1, 1, kMaxDegree));
  COLO_TRY(replicate, integerValue(kv, tomlKey(kv, {"parallelism.data_parallel_replicate_degree", "training.data_parallel_replicate_degree"}),
                                   1, 1, kMaxDegree));
  COLO_TRY(shard, integerValue(kv, tomlKey(kv, {"parallelism.data_parallel_shard_degree", "training.data_parallel_shard_degree"}), -1, -1,
                               kMaxDegree));
  q.tp = tp;
  q.pp = pp;
  q.cp = cp;
  q.ep = ep;
  // How MoE tokens reach their experts (parallelism.expert_parallel_comm_backend): torchtitan's standard
  // all-to-alls, or DeepEP's or HybridEP's hierarchical kernels (one network copy per token and node).
  const std::string backendKey = "parallelism.expert_parallel_comm_backend";
  if (kv.contains(backendKey)) {
    const std::string backend = kv.at(backendKey);
    if (backend != "standard" && backend != "deepep" && backend != "hybridep") {
      return fail(Error::badInput(backendKey + ": \"" + backend + "\" is not one of standard, deepep, hybridep"));
    }
    // torchtitan refuses DeepEP and HybridEP without expert parallelism (parallelize.py).
    if (backend != "standard" && ep < 2) {
      return fail(Error::badInput(backendKey + ": \"" + backend + "\" needs parallelism.expert_parallel_degree above 1, got " +
                                  std::to_string(ep)));
    }
    if (backend != "standard") p.execution.moeDispatcher = *parseMoeDispatcher(backend);  // deepep or hybridep, checked above
  }
  const std::int64_t world = p.cluster.totalGpus();
  if (world % (tp * pp * cp * replicate) != 0) {
    return fail(Error::badInput("parallelism: the cluster's " + std::to_string(world) + " GPUs are not a multiple of the degrees"));
  }
  const std::int64_t shardDegree = shard > 0 ? shard : world / (tp * pp * cp * replicate);
  if (shardDegree != world / (tp * pp * cp * replicate)) {
    return fail(Error::badInput("parallelism: the degrees multiply to " + std::to_string(shardDegree) + " x " +
                                std::to_string(tp * pp * cp * replicate) + ", the cluster has " + std::to_string(world) + " GPUs"));
  }
  q.dp = replicate * shardDegree;
  q.sequenceParallel = tp > 1;  // torchtitan's TP plan runs the norms sequence-parallel
  // Under TP torchtitan computes the loss on each rank's vocabulary shard (DTensor's loss_parallel, as
  // colo costs it). Turned off, the output layer gathers the whole vocabulary's logits on every rank,
  // which colo does not cost.
  const std::string lossParallelKey = tomlKey(kv, {"parallelism.disable_loss_parallel", "training.disable_loss_parallel"});
  if (tp > 1 && tomlTrue(kv, lossParallelKey)) {
    return fail(Error::badInput(lossParallelKey + " = true with tensor parallelism " + std::to_string(tp) +
                                ": colo costs the loss on each rank's vocabulary shard (loss parallel); without it every rank "
                                "holds the whole vocabulary's logits, which colo does not model"));
  }
  // FSDP2 (ZeRO-3 with fp32 sharded parameters) over the shard and context-parallel ranks together
  // (torchtitan's dp_shard_cp mesh: FSDP applies when either is on, parallelize_llama.py); HSDP shards
  // within replicas, which colo approximates by sharding over the whole data-parallel group.
  p.zeroStage = shardDegree > 1 || cp > 1 ? 3 : 0;
  p.execution.fp32Params = true;
  p.execution.gradAccumulation = GradAccumulation::kAutograd;
  // Under pipeline parallelism PyTorch's pipelining syncs FSDP gradients on the last micro-batch only,
  // and torchtitan keeps each stage's layers gathered (reshard_after_forward off with PP).
  if (pp > 1 && p.zeroStage >= 2) p.execution.gradSync = GradSync::kStep;
  p.execution.tpCommOverlap = tomlTrue(kv, tomlKey(kv, {"parallelism.enable_async_tensor_parallel", "experimental.enable_async_tensor_parallel"}));
  if (p.execution.tpCommOverlap) p.execution.tpOverlap = TpOverlap::kMicroPipeline;  // PyTorch's async TP
  const std::string rotateKey = tomlKey(kv, {"parallelism.context_parallel_rotate_method", "experimental.context_parallel_rotate_method"});
  const std::string rotate = kv.contains(rotateKey) ? kv.at(rotateKey) : "allgather";
  if (cp > 1) p.execution.cpCommType = rotate == "alltoall" ? CpCommType::kP2p : CpCommType::kAllGather;
  return {};
}

// The batch, sequence and pipeline schedule: the local batch (training.local_batch_size, until
// 2025-06 training.batch_size) is split into micro-batches under pipelining only.
Result<void> readTorchtitanBatch(const Toml& kv, Plan& p) {
  auto& q = p.parallel;
  COLO_TRY(local, integerValue(kv, "training.local_batch_size", 0));
  COLO_TRY(legacyLocal, integerValue(kv, "training.batch_size", 8));
  const std::int64_t localBatch = local > 0 ? local : legacyLocal;
  COLO_TRY(global, integerValue(kv, "training.global_batch_size", -1, -1));
  COLO_TRY(seq, integerValue(kv, "training.seq_len", 2048));
  p.globalBatchSize = global > 0 ? global : localBatch * q.dp;
  p.seqLen = seq;
  const std::string countKey = tomlKey(kv, {"parallelism.pipeline_parallel_microbatches", "experimental.pipeline_parallel_microbatches"});
  // The count belongs to the layouts before 2025-04: a count key, or the [experimental] pipeline keys.
  const bool countLayout = kv.contains(countKey) || kv.contains("experimental.pipeline_parallel_degree");
  if (q.pp > 1 && !kv.contains("parallelism.pipeline_parallel_microbatch_size") && countLayout) {
    // The older layout: a count of micro-batches, the pipeline degree unless set.
    COLO_TRY(count, integerValue(kv, countKey, q.pp, 1, kMaxLaunchInteger));
    if (localBatch % count != 0) {
      return fail(Error::badInput(countKey + ": the local batch " + std::to_string(localBatch) + " is not divisible by " +
                                  std::to_string(count) + " micro-batches"));
    }
    p.microBatchSize = localBatch / count;
  } else {
    COLO_TRY(ppMicro, integerValue(kv, "parallelism.pipeline_parallel_microbatch_size", 1));
    p.microBatchSize = q.pp > 1 ? ppMicro : localBatch;
  }
  const std::string scheduleKey = tomlKey(kv, {"parallelism.pipeline_parallel_schedule", "experimental.pipeline_parallel_schedule"});
  // Without pipelining torchtitan builds no schedule, whatever the TOML names (its shipped DeepSeek-V3
  // config names Interleaved1F1B beside pipeline_parallel_degree 1).
  const std::string schedule = kv.contains(scheduleKey) && q.pp > 1 ? kv.at(scheduleKey) : "1F1B";
  p.schedule = schedule == "GPipe" ? Schedule::kGpipe
               : schedule.find("ZeroBubble") != std::string::npos ? Schedule::kZeroBubble
               : schedule == "Interleaved1F1B" ? Schedule::kInterleaved
                                               : Schedule::kOneFOneB;
  q.virtualStages = p.schedule == Schedule::kInterleaved ? 2 : 1;  // torchtitan's default: two stages per rank
  // PyTorch's pipelining waits for each time step's batched sends and receives before the next compute
  // (PipelineScheduleMulti): nothing of a hop hides behind another chunk.
  p.execution.overlapP2pComm = false;
  return {};
}

// torch.compile's fusions, the loss and float8: what kernels the job runs.
Result<void> readTorchtitanKernels(const Toml& kv, Plan& p) {
  // torch.compile (training.compile until 2025-08, then compile.enable with compile.components, default
  // model and loss) fuses the blocks' norms, rotary embedding and SwiGLU; without it the model runs them as
  // PyTorch's eager decompositions (nn.RMSNorm's composite form, the complex-multiply rotary, F.silu then
  // *), unless model.norm_type names the fused Triton RMSNorm torchtitan offered in 2024.
  const std::string components = kv.contains("compile.components") ? kv.at("compile.components") : "model, loss";
  const bool compiled = tomlTrue(kv, "training.compile") || (tomlTrue(kv, "compile.enable") && components.find("model") != std::string::npos);
  // Its loss is F.cross_entropy on the logits upcast to fp32, compiled only with compile.components
  // holding "loss" (from 2025-08).
  p.execution.torchCrossEntropy = !(tomlTrue(kv, "compile.enable") && components.find("loss") != std::string::npos);
  // Compile wraps each transformer block (apply_compile), so the final norm stays eager either way.
  p.execution.unfused = compiled ? UnfusedKernels{.finalNorm = true} : UnfusedKernels::all();
  if (kv.contains("model.norm_type") && kv.at("model.norm_type").find("fused") != std::string::npos) {
    p.execution.unfused.rmsNorm = p.execution.unfused.finalNorm = false;
  }
  // PyTorch's SDPA flash backend (FlashAttention-2's Ampere kernels on Hopper) ran torchtitan's
  // attention until cuDNN's went first on every GPU (PR 1776, 2025-10-09). A TOML with a key torchtitan
  // stopped reading before then (the layouts above; training.compile until 2025-08) was written for such
  // a torchtitan; a newer layout does not say, and keeps the GPU's fastest kernels.
  for (const auto& entry : kv) {
    const std::string& key = entry.first;
    const bool legacy = key.starts_with("experimental.") || key == "training.compile" || key == "training.batch_size" ||
                        (key.starts_with("training.") && key.ends_with("_degree")) || key == "float8.enable_float8_linear" ||
                        key == "parallelism.pipeline_parallel_microbatches";  // (batch_size: until 2025-06)
    if (legacy) p.execution.flashAttention2 = true;
  }
  const std::string converters = kv.contains("model.converters") ? kv.at("model.converters") : "";
  const bool float8 = converters.find("float8") != std::string::npos || tomlTrue(kv, "float8.enable_float8_linear");
  p.precision = float8 ? DType::kFp8 : DType::kBf16;
  if (p.precision == DType::kFp8) {
    // torchao's recipe (float8.recipe_name; quantize.linear.float8.recipe_name since late 2025); unset
    // means tensorwise (before recipes, 2024's dynamic scaling: tensorwise).
    std::string recipe = "tensorwise";
    for (const char* key : {"float8.recipe_name", "quantize.linear.float8.recipe_name"}) {
      if (kv.contains(key)) recipe = kv.at(key);
    }
    auto parsed = parseFloat8Recipe(recipe);
    if (!parsed || transformerEngineRecipe(*parsed)) {
      return fail(Error::badInput("float8.recipe_name: expected tensorwise, rowwise or rowwise_with_gw_hp, got \"" + recipe + "\""));
    }
    p.execution.float8Recipe = *parsed;
  }
  return {};
}

// Activation checkpointing: none, full, or selective (per op, or every N-th block fully).
Result<void> readTorchtitanCheckpointing(const Toml& kv, Plan& p) {
  const std::string mode = kv.contains("activation_checkpoint.mode") ? kv.at("activation_checkpoint.mode") : "selective";
  const std::string option = kv.contains("activation_checkpoint.selective_ac_option") ? kv.at("activation_checkpoint.selective_ac_option") : "op";
  if (mode != "none" && mode != "selective" && mode != "full") {
    return fail(Error::badInput("activation_checkpoint.mode: expected none, selective or full, got \"" + mode + "\""));
  }
  const std::int64_t every = option == "op" ? 0 : std::strtoll(option.c_str(), nullptr, 10);
  if (mode == "selective" && option != "op" && (every < 1 || std::to_string(every) != option)) {
    return fail(Error::badInput("activation_checkpoint.selective_ac_option: expected op or a positive integer, got \"" + option + "\""));
  }
  const RecomputePolicy policy = mode == "full" ? RecomputePolicy::kFull
                                 : mode == "none" ? RecomputePolicy::kNone
                                 : option == "op" ? RecomputePolicy::kOp
                                                  : RecomputePolicy::kFull;  // every N-th layer fully recomputed
  p.stages = uniformStages(p.model.numLayers(), p.parallel.pp * p.parallel.virtualStages, policy);
  if (mode == "selective" && option != "op") {
    for (auto& st : p.stages) st.recomputeLayers = st.layers / every;
  }
  return {};
}

}  // namespace

Result<Plan> importTorchtitan(const std::string& toml, const ImportContext& context) {
  auto kv = tomlScalars(toml);
  if (!kv) return fail(kv.error());
  Plan p;
  p.cluster = context.cluster;
  if (context.model) {
    p.model = *context.model;
  } else {
    // torchtitan's model name and flavor, for the library models colo ships.
    const std::string name = kv->contains("model.name") ? kv->at("model.name") : "";
    std::string flavor = kv->contains("model.flavor") ? kv->at("model.flavor") : "";
    std::transform(flavor.begin(), flavor.end(), flavor.begin(), [](unsigned char c) { return std::tolower(c); });
    const std::string library = name + "-" + flavor;
    auto file = resolveLibraryFile(LibraryKind::kModels, library);
    if (name.empty() || !file) {
      return fail(Error::badInput("model.name \"" + name + "\", flavor \"" + flavor + "\" is not a colo library model: pass --model"));
    }
    auto model = loadModel(*file);
    if (!model) return fail(model.error());
    p.model = *model;
  }
  for (auto read : {readTorchtitanMesh, readTorchtitanBatch, readTorchtitanKernels, readTorchtitanCheckpointing}) {
    if (auto ok = read(*kv, p); !ok) return fail(ok.error());
  }
  return finish(p, "a torchtitan TOML");
}

#undef COLO_TRY

}  // namespace colo::planner
