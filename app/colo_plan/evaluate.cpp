// colo-plan evaluate: predict one fully specified plan.
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "args.h"
#include "inputs.h"
#include "colo/core/library.h"
#include "colo/core/number_list.h"
#include "colo/core/units.h"
#include "colo/costmodel/evaluator.h"
#include "colo/costmodel/error_band.h"
#include "colo/costmodel/timeline.h"
#include "colo/planner/search.h"
#include "commands.h"
#include "text_table.h"

namespace colo::app {
namespace {

const std::vector<OptionSpec>& evaluateOptions() {
  static const std::vector<OptionSpec> specs = [] {
    std::vector<OptionSpec> own{
      {"plan", "FILE", "evaluate a saved colo.plan/1 file (the other plan options are then not allowed)"},
      {"model", "M", "model: library name or file (colo.model/1, HF config.json, colo.opgraph/1)"},
      {"cluster", "C", "cluster: library name or colo.cluster/1 file"},
      {"gpus", "N", "scale the cluster to N GPUs"},
      {"tp", "T", "tensor-parallel degree (default 1)"},
      {"pp", "P", "pipeline-parallel degree (default 1)"},
      {"dp", "D", "data-parallel degree (default: GPUs / (tp*pp*cp))"},
      {"cp", "C", "context-parallel degree (default 1)"},
      {"ep", "E", "expert-parallel degree, MoE only (default 1)"},
      {"etp", "T", "tensor-parallel degree of the expert layers (default: tp); ep may then exceed dp*cp (MoE parallel folding)"},
      {"cp-comm-type", "T", "context-parallel exchange: p2p (ring, default), all_gather, a2a or a2a+p2p (Megatron's --cp-comm-type)"},
      {"hierarchical-cp-sizes", "A,R", "with --cp-comm-type a2a+p2p: the all-to-all level's size (consecutive cp ranks) and the ring's, A x R = cp (Megatron's --hierarchical-context-parallel-sizes)"},
      {"vpp", "V", "virtual pipeline stages per rank (interleaved schedule)"},
      {"sp", "", "Megatron sequence parallelism (needs tp > 1)"},
      {"mbs", "B", "micro-batch size, samples (default 1)"},
      {"gbs", "G", "global batch size, samples per step (required)"},
      {"seq-len", "S", "tokens per sample (default: the model's)"},
      {"zero", "Z", "ZeRO stage 0-3 (default 0; 1 = distributed optimizer)"},
      {"optimizer", "O", "adamw (default), lamb or lars (large-batch optimizers with per-parameter trust ratios)"},
      {"recompute", "R", "activation recompute: none (default), selective, full, op (per-op, as torchtitan)"},
      {"recompute-layers", "N", "recompute only the first N layers of each pipeline chunk"},
      {"recompute-modules", "M", "what selective recompute re-runs (Megatron-Core's --recompute-modules; implies --recompute selective): a comma list of core_attn (the default), moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts"},
      {"stages", "L1,L2,..", "layers of each pipeline chunk (default: even split)"},
      {"schedule", "S", "gpipe, 1f1b (default; interleaved when --vpp > 1), interleaved, zb"},
      {"precision", "P", "bf16, fp16, fp8, fp4 (Blackwell), fp32 or tf32 (fp32 states, TF32 matmuls) (default: bf16, or fp16 on GPUs without bf16)"},
      {"float8-recipe", "R", "with --precision fp8, how linears are cast: transformer_engine (default; per-tensor scaling, casts fused), mxfp8 (Transformer Engine's MXFP8 block scaling, Blackwell), or torchao's tensorwise, rowwise, rowwise_with_gw_hp (torchtitan's float8.recipe_name)"},
      {"quantized-params", "", "with fp8 or fp4 and --zero 1 or 2: Transformer Engine's weights are the quantized tensors, no 16-bit copy (Megatron's --fp8-param-gather / --fp4-param-gather); otherwise 16-bit weights beside TE's cached quantized copy"},
      {"attention", "A", "flash (default: the GPU's fastest fused kernels), flash2 (FlashAttention-2's, PyTorch SDPA) or unfused"},
      {"no-overlap-grad-reduce", "", "do not overlap data-parallel gradient reduction with backward"},
      {"no-overlap-param-gather", "", "do not overlap ZeRO parameter gathers with forward"},
      {"no-overlap-p2p-comm", "", "under the interleaved schedule, wait for each pipeline send and receive (Megatron overlaps them by default)"},
      {"tp-comm-overlap", "", "overlap tensor-parallel collectives with GEMMs"},
      {"tp-overlap", "M", "how (sets --tp-comm-overlap): userbuffers (default; Transformer Engine's, Megatron's --tp-comm-overlap) or micro_pipeline (PyTorch's async TP, torchtitan's enable_async_tensor_parallel)"},
      {"fp32-params", "", "parameters kept in fp32 as the optimizer's master, 16-bit only while in use (PyTorch FSDP, torchtitan)"},
      {"fused-cross-entropy", "", "the loss reads the 16-bit logits in one kernel, without an fp32 copy (flash-attn's, LLM Foundry's default, Liger)"},
      {"cross-entropy-in-place", "", "with --fused-cross-entropy: the loss writes the logits' gradient into them (Transformer Engine's, Megatron's --cross-entropy-fusion-impl te)"},
      {"fused-bias-grad", "", "the attention input projection's bias gradient comes from its GEMM (Transformer Engine); otherwise every bias gradient is a reduction of its own (PyTorch, Megatron-LM's own linears, Megatron-DeepSpeed)"},
      {"te-grouped-gemm", "", "an expert layer's GEMMs as Transformer Engine's GroupedLinear runs them (Megatron-Core's --moe-grouped-gemm): one cuBLAS GEMM per local expert over four streams; otherwise one grouped kernel (torchtitan's torch._grouped_mm)"},
      {"unfused-kernels", "OPS", "ops the framework runs as PyTorch's eager decompositions, not one fused kernel each: all (torchtitan without compile, Hugging Face models), or a comma list of rmsnorm, final_rmsnorm (the norm after the last block: torchtitan's compiled runs), rotary, gated_activation (default: none, as Megatron, Transformer Engine and torch.compile)"},
      {"torch-cross-entropy", "", "the loss is PyTorch's F.cross_entropy on fp32 logits (torchtitan, Hugging Face): its backward holds two fp32 gradients of the logits beside the saved log-probabilities"},
      {"native-fused-cross-entropy", "", "the loss is Megatron-Core's native fusion of its vocab-parallel cross-entropy (--cross-entropy-loss-fusion; Megatron-Bridge's default): its fp32 passes compiled into fewer kernels"},
      {"fp8-output-proj", "", "with --precision fp8 --float8-recipe mxfp8: the output layer runs in MXFP8 too (Megatron-Core's fp8_output_proj); otherwise it runs at 16 bits"},
      {"grad-nan-check", "", "Megatron-LM's check of every gradient bucket's norm for NaN and Inf before it is reduced (its default since 2023-09)"},
      {"grad-reduce-in-bf16", "", "Megatron's gradient buffer and its reduction in bf16 (its --grad-reduce-in-bf16; default fp32)"},
      {"te-dummy-wgrads", "", "Transformer Engine (2.3 on) keeps a placeholder weight gradient per distinct weight shape (Megatron-Core, Megatron-Bridge)"},
      {"per-parameter-gathers", "", "ZeRO-3 gathers and reduce-scatters one parameter tensor at a time, synchronously (DeepSpeed v0.3.13 to v0.5.4)"},
      {"moe-dispatcher", "D", "MoE token dispatch: alltoall (default; every token-expert copy apart), deepep or hybridep (one copy per destination node, forwarded over NVLink)"},
      {"ep-comm-overlap", "", "hide the expert all-to-alls behind another micro-batch's compute (Megatron-Core's --overlap-moe-expert-parallel-comm)"},
      {"grad-sync", "WHEN", "ZeRO >= 2: micro_batch (default; reduce-scatter into the shard every micro-batch, DeepSpeed, colo-run) or step (once, after the last micro-batch, as FSDP under PyTorch's pipelining)"},
      {"grad-accumulation", "MODE", "how micro-batch gradients are summed: fused (default), main_grad, autograd, fp32_copy"},
      {"host-us-per-op", "US", "host time the framework takes to issue one op (default 60, eager PyTorch; 0 = CUDA graphs)"},
      {"offload-optimizer", "F", "fraction of optimizer states on the host (ZeRO >= 1)"},
      {"calibration", "FILE", "scales fitted on your own runs of this cluster (colo-profile calibrate)"},
      {"offload-params", "F", "fraction of parameters on the host (ZeRO 3)"},
      {"offload-target", "T", "where offloaded states live: cpu (host memory, default) or nvme (ZeRO-Infinity)"},
      {"offload-activations", "N", "keep the activations of the first N layers in host memory (Megatron-Core's --cpu-offloading-num-layers; pp 1, no recompute)"},
      {"rank-order", "ORDER", "placement, innermost first (default tp-cp-dp-pp)"},
      {"costdb", "DB", "SQLite cost database (colo-profile): measured GEMMs, kernels, collectives, copies before the analytic model"},
      {"explain", "", "say where each class of figures came from: measured, interpolated, calibrated or analytic"},
      {"ops", "", "every op's forward and backward compute per micro-batch and GPU (a layer's ops once, with how many layers)"},
      {"simulate", "", "also simulate the pipeline schedule event by event and draw its timeline"},
      {"timeline", "FILE", "write the simulated timeline's events as JSON (implies --simulate)"},
      {"out", "FILE", "write the plan with its predictions as a colo.plan/1 file"},
      {"json", "", "print one JSON object"},
      {"help", "", "show this help"},
    };
    for (auto& o : budgetOptions()) own.push_back(std::move(o));
    return own;
  }();
  return specs;
}

// Plan fields named by validatePlan map back to the options a CLI user typed.
Error toOptionError(Error e) {
  static const std::map<std::string, std::string> optionOf{
      {"/parallel/tp", "--tp"},  {"/parallel/pp", "--pp"},   {"/parallel/dp", "--dp"},  {"/parallel/cp", "--cp"},
      {"/parallel/ep", "--ep"},  {"/parallel/virtual_stages", "--vpp"}, {"/parallel/sequence_parallel", "--sp"},
      {"/parallel/rank_order", "--rank-order"}, {"/parallel", "--tp/--pp/--dp/--cp"},
      {"/batch/global_batch_size", "--gbs"}, {"/batch/micro_batch_size", "--mbs"}, {"/batch/seq_len", "--seq-len"},
      {"/zero_stage", "--zero"}, {"/schedule", "--schedule"}, {"/precision", "--precision"}, {"/execution/float8_recipe", "--float8-recipe"},
      {"/execution/quantized_params", "--quantized-params"},
      {"/offload/optimizer_fraction", "--offload-optimizer"}, {"/offload/params_fraction", "--offload-params"},
      {"/offload/target", "--offload-optimizer"}, {"/stages", "--stages"},
      {"/execution/hierarchical_cp_sizes", "--hierarchical-cp-sizes"}, {"/execution/cp_comm_type", "--cp-comm-type"},
      {"/execution/native_fused_cross_entropy", "--native-fused-cross-entropy"}, {"/execution/fp8_output_proj", "--fp8-output-proj"}};
  if (e.file.empty()) {
    std::string path = e.path;
    if (path.rfind("/stages/", 0) == 0) path = "/stages";
    if (auto it = optionOf.find(path); it != optionOf.end()) {
      e.message = it->second + ": " + e.message;
      e.path.clear();
    }
  }
  return e;
}

Result<double> fractionOption(const Args& args, const std::string& name) {
  return args.number(name, 0.0, {0, 1});
}

// The parallel degrees (--tp --pp --cp --ep --etp --vpp --sp --dp, --rank-order); --dp defaults to what
// fills the cluster.
Result<void> parallelFromOptions(const Args& args, Plan& plan) {
  auto tp = args.positiveInteger("tp", 1);
  auto pp = args.positiveInteger("pp", 1);
  auto cp = args.positiveInteger("cp", 1);
  auto ep = args.positiveInteger("ep", 1);
  auto vpp = args.positiveInteger("vpp", 1);
  for (const auto* r : {&tp, &pp, &cp, &ep, &vpp}) {
    if (!*r) return fail(r->error());
  }
  plan.parallel.tp = *tp;
  plan.parallel.pp = *pp;
  plan.parallel.cp = *cp;
  plan.parallel.ep = *ep;
  if (args.has("etp")) {
    auto etp = args.positiveInteger("etp", 1);
    if (!etp) return fail(etp.error());
    plan.parallel.etp = *etp;
  }
  plan.parallel.virtualStages = *vpp;
  plan.parallel.sequenceParallel = args.has("sp");
  const std::int64_t gpus = plan.cluster.totalGpus();
  if (args.has("dp")) {
    auto dp = args.positiveInteger("dp", 1);
    if (!dp) return fail(dp.error());
    plan.parallel.dp = *dp;
  } else {
    const std::int64_t modelParallel = *tp * *pp * *cp;
    if (gpus % modelParallel != 0) {
      return fail(Error::badInput("--tp/--pp/--cp: tp*pp*cp = " + std::to_string(modelParallel) + " does not divide the cluster's " +
                                  std::to_string(gpus) + " GPUs, so no --dp fills it"));
    }
    plan.parallel.dp = gpus / modelParallel;
  }
  if (auto order = args.value("rank-order")) {
    plan.parallel.rankOrder.clear();
    std::size_t start = 0;
    while (true) {
      const auto dash = order->find('-', start);
      plan.parallel.rankOrder.push_back(order->substr(start, dash == std::string::npos ? std::string::npos : dash - start));
      if (dash == std::string::npos) break;
      start = dash + 1;
    }
  }
  return {};
}

// How the step runs: attention kernels, overlaps, fusions, gradient accumulation and sync, the MoE
// dispatcher, the float8 recipe and the host's time per op.
Result<void> executionFromOptions(const Args& args, Execution& x) {
  const std::string attention = args.value("attention", "flash");
  if (!setAttention(x, attention)) {
    return fail(Error::badInput("--attention: expected flash, flash2 or unfused, got \"" + attention + "\""));
  }
  x.overlapGradReduce = !args.has("no-overlap-grad-reduce");
  x.overlapParamGather = !args.has("no-overlap-param-gather");
  x.overlapP2pComm = !args.has("no-overlap-p2p-comm");
  x.tpCommOverlap = args.has("tp-comm-overlap") || args.has("tp-overlap");
  if (auto method = args.value("tp-overlap")) {
    auto parsed = parseTpOverlap(*method);
    if (!parsed) return fail(Error::badInput("--tp-overlap: " + parsed.error().message));
    x.tpOverlap = *parsed;
  }
  x.fp32Params = args.has("fp32-params");
  x.fusedCrossEntropy = args.has("fused-cross-entropy");
  x.fusedBiasGrad = args.has("fused-bias-grad");
  x.teGroupedGemm = args.has("te-grouped-gemm");
  x.gradNanCheck = args.has("grad-nan-check");
  x.gradReduceBf16 = args.has("grad-reduce-in-bf16");
  if (auto unfused = args.value("unfused-kernels")) {
    auto parsed = parseUnfusedKernels(*unfused);
    if (!parsed) return fail(Error::badInput("--unfused-kernels: " + parsed.error().message));
    x.unfused = *parsed;
  }
  x.teDummyWgrads = args.has("te-dummy-wgrads");
  x.perParameterGathers = args.has("per-parameter-gathers");
  x.crossEntropyInPlace = args.has("cross-entropy-in-place");
  x.torchCrossEntropy = args.has("torch-cross-entropy");
  x.nativeFusedCrossEntropy = args.has("native-fused-cross-entropy");
  x.fp8OutputProj = args.has("fp8-output-proj");
  if (auto cpComm = args.value("cp-comm-type")) {
    auto parsed = parseCpCommType(*cpComm);
    if (!parsed) return fail(Error::badInput("--cp-comm-type: " + parsed.error().message));
    x.cpCommType = *parsed;
  }
  auto sizes = args.positiveIntegers("hierarchical-cp-sizes", "the all-to-all and ring sizes", 1'000'000);
  if (!sizes) return fail(sizes.error());
  x.hierarchicalCpSizes = *sizes;
  auto accumulation = parseGradAccumulation(args.value("grad-accumulation", "fused"));
  if (!accumulation) return fail(Error::badInput("--grad-accumulation: " + accumulation.error().message));
  x.gradAccumulation = *accumulation;
  auto sync = parseGradSync(args.value("grad-sync", "micro_batch"));
  if (!sync) return fail(Error::badInput("--grad-sync: " + sync.error().message));
  x.gradSync = *sync;
  auto dispatcher = parseMoeDispatcher(args.value("moe-dispatcher", "alltoall"));
  if (!dispatcher) return fail(Error::badInput("--moe-dispatcher: " + dispatcher.error().message));
  x.moeDispatcher = *dispatcher;
  x.epCommOverlap = args.has("ep-comm-overlap");
  auto recipe = parseFloat8Recipe(args.value("float8-recipe", "transformer_engine"));
  if (!recipe) return fail(Error::badInput("--float8-recipe: " + recipe.error().message));
  x.float8Recipe = *recipe;
  x.quantizedParams = args.has("quantized-params");
  if (args.has("host-us-per-op")) {
    auto us = args.number("host-us-per-op", 0, {0, 1e6});  // microseconds
    if (!us) return fail(us.error());
    x.hostMicrosecondsPerOp = *us;
  }
  return {};
}

// What offload keeps off the GPUs (--offload-optimizer, --offload-params) and where (--offload-target).
Result<void> offloadFromOptions(const Args& args, Offload& offload) {
  auto offOpt = fractionOption(args, "offload-optimizer");
  if (!offOpt) return fail(offOpt.error());
  auto offParams = fractionOption(args, "offload-params");
  if (!offParams) return fail(offParams.error());
  offload.optimizerFraction = *offOpt;
  offload.paramsFraction = *offParams;
  const std::string target = args.value("offload-target", "cpu");
  if (target != "cpu" && target != "nvme") return fail(Error::badInput("--offload-target: expected cpu or nvme, got \"" + target + "\""));
  offload.target = target == "nvme" ? OffloadTarget::kNvme : OffloadTarget::kCpu;
  if (args.has("offload-activations")) {
    auto n = args.positiveInteger("offload-activations", 1);
    if (!n) return fail(n.error());
    offload.activationLayers = *n;
  }
  return {};
}

// The pipeline chunks' layers (--stages, else an even split over pp*vpp) and their recompute (the
// parsed --recompute, --recompute-layers).
Result<void> stagesFromOptions(const Args& args, RecomputePolicy policy, Plan& plan) {
  const std::int64_t chunks = plan.parallel.pp * plan.parallel.virtualStages;
  const std::int64_t layers = plan.model.numLayers();
  if (args.has("stages")) {
    // The first and last chunk may be 0: the embedding alone, the loss alone (Megatron's
    // --account-for-embedding/loss-in-pipeline-split); every other count is positive.
    std::string text = *args.value("stages");
    const bool firstEmpty = text.starts_with("0,");
    const bool lastEmpty = text.size() > 2 && text.ends_with(",0");
    if (firstEmpty) text[0] = '1';
    if (lastEmpty) text.back() = '1';
    const auto counts = parsePositiveIntegerList(text, INT64_MAX);
    if (!counts) return fail(Error::badInput("--stages: expected layer counts (positive integers; the first and last may be 0) separated by commas, got \"" +
                                             *args.value("stages") + "\""));
    for (const std::int64_t n : *counts) {
      StagePlan stage;
      stage.layers = n;
      plan.stages.push_back(stage);
    }
    if (firstEmpty) plan.stages.front().layers = 0;
    if (lastEmpty) plan.stages.back().layers = 0;
  } else {
    if (layers % chunks != 0) {
      return fail(Error::badInput("--pp/--vpp: the model's " + std::to_string(layers) +
                                  " layers are not divisible by pp*vpp = " + std::to_string(chunks) +
                                  " (give --stages to split them unevenly)"));
    }
    plan.stages = uniformStages(layers, chunks, RecomputePolicy::kNone);
  }
  std::optional<std::int64_t> recomputeLayers;
  if (args.has("recompute-layers")) {
    auto n = args.positiveInteger("recompute-layers", 1);
    if (!n) return fail(n.error());
    recomputeLayers = *n;
  }
  for (auto& stage : plan.stages) {
    stage.recompute = policy;
    stage.recomputeLayers = policy == RecomputePolicy::kNone ? 0 : std::min(stage.layers, recomputeLayers.value_or(stage.layers));
  }
  return {};
}

// Builds a plan from the command line. Every option is checked; consistency is validatePlan's job.
Result<Plan> planFromOptions(const Args& args, const std::vector<std::string>& argv) {
  Plan plan;
  if (!args.value("model")) return fail(Error::badInput("missing --model (or --plan FILE)"));
  if (!args.value("cluster")) return fail(Error::badInput("missing --cluster (or --plan FILE)"));
  auto inputs = loadModelAndCluster(args);
  if (!inputs) return fail(inputs.error());
  auto& [model, cluster] = *inputs;
  plan.model = std::move(model);
  plan.cluster = std::move(cluster);

  // The integers first, then the missing --gbs, then each part: the order of the checks, so of the
  // first error reported, is the one users have seen.
  for (const char* name : {"tp", "pp", "cp", "ep", "vpp"}) {
    if (auto r = args.positiveInteger(name, 1); !r) return fail(r.error());
  }
  auto mbs = args.positiveInteger("mbs", 1);
  auto seq = args.positiveInteger("seq-len", plan.model.defaultSeqLen());
  for (const auto* r : {&mbs, &seq}) {
    if (!*r) return fail(r->error());
  }
  if (!args.has("gbs")) return fail(Error::badInput("missing --gbs (global batch size, samples per step)"));
  auto gbs = args.positiveInteger("gbs", 1);
  if (!gbs) return fail(gbs.error());
  if (auto ok = parallelFromOptions(args, plan); !ok) return fail(ok.error());
  plan.microBatchSize = *mbs;
  plan.globalBatchSize = *gbs;
  plan.seqLen = *seq;
  if (auto z = args.value("zero")) {
    if (*z != "0" && *z != "1" && *z != "2" && *z != "3") {
      return fail(Error::badInput("--zero: expected 0, 1, 2 or 3, got \"" + *z + "\""));
    }
    plan.zeroStage = std::stoi(*z);
  }
  auto optimizer = parseOptimizer(args.value("optimizer", "adamw"));
  if (!optimizer) return fail(Error::badInput("--optimizer: " + optimizer.error().message));
  plan.optimizer = *optimizer;
  const bool modules = args.has("recompute-modules");
  auto policy = parseRecompute(args.value("recompute", modules ? "selective" : "none"));
  if (!policy) return fail(Error::badInput("--recompute: " + policy.error().message));
  if (modules) {
    if (*policy != RecomputePolicy::kSelective) {
      return fail(Error::badInput("--recompute-modules: says what selective recompute re-runs, but --recompute is " + toString(*policy)));
    }
    auto parsed = parseRecomputeModules(*args.value("recompute-modules"));
    if (!parsed) return fail(Error::badInput("--recompute-modules: " + parsed.error().message));
    plan.execution.recomputeModules = *parsed;
  }
  const std::string defaultSchedule = plan.parallel.virtualStages > 1 ? "interleaved" : "1f1b";
  auto schedule = parseSchedule(args.value("schedule", defaultSchedule));
  if (!schedule) return fail(Error::badInput("--schedule: " + schedule.error().message));
  plan.schedule = *schedule;
  auto precision = precisionOption(args, &plan.cluster);
  if (!precision) return fail(precision.error());
  plan.precision = *precision;
  if (auto ok = executionFromOptions(args, plan.execution); !ok) return fail(ok.error());
  if (auto ok = offloadFromOptions(args, plan.offload); !ok) return fail(ok.error());
  if (auto ok = stagesFromOptions(args, *policy, plan); !ok) return fail(ok.error());
  plan.name = plan.model.name() + " tp" + std::to_string(plan.parallel.tp) + " pp" + std::to_string(plan.parallel.pp) +
              " dp" + std::to_string(plan.parallel.dp);
  std::string command = "colo-plan evaluate";
  for (const auto& a : argv) command += " " + a;
  plan.provenance.command = command;
  return plan;
}

std::string seconds(double s) {
  if (s >= 1) return formatFixed(s, 3) + " s";
  if (s >= 1e-3) return formatFixed(s * 1e3, 2) + " ms";
  return formatFixed(s * 1e6, 1) + " us";
}

// Every op's compute, per micro-batch and GPU, with its share of the model's forward + backward compute.
std::string renderOps(const std::vector<costmodel::Evaluator::OpTime>& ops) {
  double total = 0;
  for (const auto& o : ops) total += static_cast<double>(o.count) * (o.forwardSeconds + o.backwardSeconds);
  TextTable table({"block", "x", "op", "kind", "forward", "backward", "share"}, {false, true, false, false, true, true, true});
  for (const auto& o : ops) {
    if (o.forwardSeconds == 0 && o.backwardSeconds == 0) continue;  // fused into another op (FlashAttention)
    const double share = total > 0 ? static_cast<double>(o.count) * (o.forwardSeconds + o.backwardSeconds) / total : 0.0;
    table.addRow({o.block, std::to_string(o.count), o.op, o.kind, seconds(o.forwardSeconds), seconds(o.backwardSeconds),
                  formatFixed(100 * share, 1) + "%"});
  }
  return "\nops       compute per micro-batch and GPU (x: blocks of this kind in the model; share of all ops' forward +\n"
         "          backward; communication, recompute and the optimizer are in the breakdown above)\n" +
         table.render();
}

std::string renderSources(const Plan& plan, const costmodel::Evaluation& e) {
  const auto& c = e.calibration;
  std::ostringstream o;
  o << "\nwhere the figures come from" << (c.costDb.empty() ? " (no cost database: --costdb DB)" : " (cost database " + c.costDb + ")")
    << "\n";
  TextTable t({"op class", "source"}, {false, false});
  std::ostringstream gemm;
  gemm << e.gemmExact << " shapes measured exactly, " << e.gemmInterpolated << " from the nearest measured shape, "
       << e.gemmRoofline << " by the roofline";
  if (c.gemmRooflineScalePoints > 0) {
    gemm << " (calibrated x" << formatFixed(c.gemmRooflineScale, 3) << ", fitted on " << c.gemmRooflineScalePoints
         << " measured GEMMs)";
  } else if (e.gemmRoofline > 0) {
    gemm << " (datasheet peak x documented efficiency)";
  }
  t.addRow({"GEMMs", gemm.str()});
  t.addRow({"other kernels", std::to_string(e.kernelsMeasured) + " measured, " + std::to_string(e.kernelsRoofline) +
                                  " by memory bandwidth" + (plan.execution.flashAttention ? " (flash attention among them: its measured fused kernel, else its roofline)" : "")});
  const double buffer = costmodel::gradientBufferBytes(plan);
  const std::string bufferNote =
      buffer > 0 ? "; Megatron's gradient buffer zeroed" + std::string(plan.parallel.dp * plan.parallel.cp > 1 ? " and scaled" : "") +
                       " whole, " + formatFixed(buffer * (plan.parallel.dp * plan.parallel.cp > 1 ? 3 : 1), 0) + " bytes per local parameter"
                 : "";
  const std::string checkNote = plan.execution.gradNanCheck
                                    ? "; NaN check of the gradients, " + formatFixed(plan.precision == DType::kFp16 ? 2.0 : 4.0, 0) +
                                          " bytes per local parameter and two host synchronizations per bucket"
                                    : "";
  t.addRow({"optimizer step", c.optimizerMeasured ? "measured AdamW step (adam_step), linear in parameters" + bufferNote + checkNote
                                                  : formatFixed(costmodel::optimizerStepBytes(plan.precision, plan.execution.fp32Params, plan.optimizer) - buffer, 0) +
                                                        " bytes per parameter of the shard (" + toString(plan.precision) +
                                                        (plan.execution.fp32Params ? " " + toString(plan.optimizer) + " on fp32 parameters)" : " mixed-precision " + toString(plan.optimizer) + ")") +
                                                        " over memory bandwidth" + bufferNote + checkNote});
  for (const auto& level : plan.cluster.links) {
    std::string source = !level.collectives.empty() ? "cluster file's measured figures, per collective"
                         : level.efficiency > 0     ? "cluster file's measured bandwidth share and latency"
                                                    : "datasheet bandwidth x link efficiency, datasheet latency";
    for (const auto& f : c.links) {
      if (f.level == level.name) {
        source = "measured collectives (" + std::to_string(f.points) + "): " + formatFixed(f.latencySeconds * 1e6, 1) +
                 " us per ring step, " + formatFixed(f.bytesPerSecond / 1e9, 2) + " GB/s, rms error " +
                 formatFixed(100 * f.rmsRelativeError, 1) + "%";
      }
    }
    t.addRow({"link " + level.name, source});
  }
  t.addRow({"host-device", c.pcieBytesPerSecond > 0 ? "measured pinned copies: " + formatFixed(c.pcieBytesPerSecond / 1e9, 2) + " GB/s"
                                                     : "cluster file's PCIe bandwidth"});
  t.addRow({"memory", "analytic (docs/costmodel.md); not measured"});
  o << t.render();
  return o.str();
}

// Where the step's time goes, and each pipeline stage's memory by kind with a gauge of the GPU.
std::string renderBreakdown(const costmodel::Evaluation& ev) {
  std::ostringstream out;
  const auto& t = ev.time;
  TextTable time({"where the step goes", "seconds", "share"}, {false, true, true});
  const std::pair<const char*, double> parts[] = {
      {"compute (forward + backward)", t.compute}, {"recompute", t.recompute}, {"tensor-parallel comm", t.tpComm},
      {"context-parallel comm", t.cpComm},         {"expert all-to-all", t.epComm}, {"pipeline send/recv", t.ppComm},
      {"data-parallel comm (exposed)", t.dpComm},   {"pipeline bubble", t.bubble},  {"gradient accumulation", t.gradAccum}, {"offload copies (PCIe)", t.offload},
      {"optimizer step", t.optimizer}};
  for (const auto& [name, value] : parts) {
    if (value <= 0) continue;
    time.addRow({name, formatFixed(value, 4), formatFixed(100 * value / ev.stepSeconds, 1) + "%"});
  }
  out << time.render("  ");
  TextTable mem({"stage", "layers", "weights", "grads", "optimizer", "activations", "buffers", "other", "total", ""},
                {true, true, true, true, true, true, true, true, true, false});
  for (const auto& s : ev.stages) {
    const auto& m = s.memory;
    const int bar = static_cast<int>(std::round(20.0 * std::min(1.5, m.total() / ev.gpuMemoryBytes)));
    std::string gauge = std::string(static_cast<std::size_t>(std::min(bar, 20)), '#');
    gauge.resize(20, '.');
    if (bar > 20) gauge += std::string(static_cast<std::size_t>(bar - 20), '!');
    mem.addRow({std::to_string(s.stage), std::to_string(s.layers), formatBytes(m.weights), formatBytes(m.gradients),
                formatBytes(m.optimizer), formatBytes(m.activations), formatBytes(m.buffers),
                formatBytes(m.allocator + m.context), formatBytes(m.total()), "|" + gauge + "|"});
  }
  out << mem.render("  ");
  return out.str();
}

// The plan in one line: its layout and the execution choices that move its time or memory.
std::string planHeadline(const Plan& plan, const costmodel::Evaluation& ev) {
  std::ostringstream out;
  const auto& p = plan.parallel;
  out << "plan      " << plan.model.name() << " on " << clusterLabel(plan.cluster) << ": tp " << p.tp << " pp " << p.pp << " dp " << p.dp;
  if (p.cp > 1) out << " cp " << p.cp;
  if (p.ep > 1) out << " ep " << p.ep;
  if (p.etp > 0) out << " expert-tp " << p.etp;
  if (p.virtualStages > 1) out << " vpp " << p.virtualStages;
  if (p.sequenceParallel) out << " +sp";
  out << ", " << toString(plan.schedule) << ", mbs " << plan.microBatchSize << " x " << ev.microBatches
      << " micro-batches, gbs " << plan.globalBatchSize << " x " << plan.seqLen << " tokens, ZeRO-" << plan.zeroStage
      << ", " << toString(plan.precision) << ", " << attentionName(plan.execution)
      << " attention, recompute " << toString(plan.stages.front().recompute)
      << (plan.stages.front().recompute == RecomputePolicy::kSelective && !plan.execution.recomputeModules.isDefault()
              ? " (" + recomputeModulesLabel(plan.execution.recomputeModules) + ")"
              : "")
      << (plan.offload.activationLayers > 0 ? ", activations of " + std::to_string(plan.offload.activationLayers) + " layers offloaded" : "")
      << (plan.execution.gradAccumulation == GradAccumulation::kFused
              ? ""
              : ", grad accumulation " + toString(plan.execution.gradAccumulation))
      << (plan.execution.fp32Params && plan.precision != DType::kFp32 ? ", fp32 params" : "")
      << (plan.execution.fusedCrossEntropy ? (plan.execution.crossEntropyInPlace ? ", fused cross-entropy in place" : ", fused cross-entropy") : "")
      << (plan.execution.torchCrossEntropy ? ", PyTorch cross-entropy" : "")
      << (plan.execution.nativeFusedCrossEntropy ? ", Megatron's fused cross-entropy" : "")
      << (plan.execution.fp8OutputProj ? ", MXFP8 output layer" : "")
      << (plan.execution.teDummyWgrads ? ", TE placeholder wgrads" : "")
      << (plan.execution.perParameterGathers && plan.zeroStage == 3 ? ", ZeRO-3 gathers per parameter" : "")
      << (plan.execution.fusedBiasGrad ? ", fused bias gradients" : "")
      << (plan.execution.teGroupedGemm ? ", TE grouped GEMMs" : "")
      << (plan.execution.gradNanCheck ? ", NaN check of gradients" : "")
      << (plan.execution.gradReduceBf16 ? ", bf16 gradient reduction" : "")
      << (plan.execution.unfused.any() ? ", eager " + unfusedKernelsLabel(plan.execution.unfused) : "")
      << (plan.parallel.pp > 1 && plan.parallel.virtualStages > 1 && !plan.execution.overlapP2pComm ? ", pipeline sends exposed" : "")
      << (plan.execution.tpCommOverlap && p.tp > 1
              ? (plan.execution.tpOverlap == TpOverlap::kUserbuffers ? ", TP overlap (userbuffers)"
                 : p.sequenceParallel                                ? ", async TP"
                                                                     : ", async TP (no effect without sp)")
              : "")
      << (plan.zeroStage >= 2 && plan.execution.gradSync == GradSync::kStep ? ", gradients synced once per step" : "")
      << (plan.precision == DType::kFp8 && !transformerEngineRecipe(plan.execution.float8Recipe)
              ? ", torchao float8 " + toString(plan.execution.float8Recipe)
              : "")
      << (plan.precision == DType::kFp8 && plan.execution.float8Recipe == Float8Recipe::kMxfp8 ? ", MXFP8" : "")
      << (plan.execution.quantizedParams ? ", quantized weights" : "")
      << (plan.execution.moeDispatcher == MoeDispatcher::kDeepEp     ? ", DeepEP dispatch"
          : plan.execution.moeDispatcher == MoeDispatcher::kHybridEp ? ", HybridEP dispatch"
                                                                     : "")
      << (plan.execution.epCommOverlap ? ", expert all-to-alls overlapped" : "") << "\n";
  return out.str();
}

std::string renderEvaluation(const Plan& plan, const costmodel::Evaluation& ev, const costmodel::RunCalibration* calibration) {
  std::ostringstream out;
  out << planHeadline(plan, ev);
  // A calibrated prediction has no band from the development runs: it says what it was calibrated on.
  const costmodel::PredictionBands bands = calibration ? costmodel::PredictionBands{} : costmodel::bandsOf(plan, ev);
  std::string note = bands.time ? " (" + bands.time->describe() + ")" : "";
  if (calibration) {
    note = " (calibrated on " + std::to_string(calibration->runs) + " of your runs: compute x" +
           formatFixed(calibration->computeScale, 2) + ", the rest x" + formatFixed(calibration->otherScale, 2) + ")";
  }
  out << "step      " << seconds(ev.stepSeconds) << note << "  |  "
      << formatCount(ev.tokensPerSecond) << " tokens/s  |  "
      << formatFixed(ev.modelTflopsPerGpu, 1) << " model TFLOP/s/GPU (MFU " << formatFixed(100 * ev.mfu, 1) << "%), "
      << formatFixed(ev.hardwareTflopsPerGpu, 1) << " hardware  |  bubble " << formatFixed(100 * ev.bubbleFraction, 1)
      << "%\n";
  out << "memory    peak " << formatBytes(ev.peakMemoryBytes)
      << (bands.memory ? " (" + bands.memory->describe() + ")" : "") << " of " << formatBytes(ev.gpuMemoryBytes)
      << " per GPU: " << (ev.fits ? "fits" : "DOES NOT FIT");
  if (!ev.fitsHost) out << " (offloaded states do not fit the node, below)";
  if (bands.memoryAtRisk(ev)) {
    out << ", AT RISK: at the top of its error band the peak is "
        << formatBytes(ev.peakMemoryBytes * (1 + bands.memory->high));
  }
  out << "\n";
  // Offloaded activations stay in host memory; the states go to NVMe with offload.target nvme.
  const bool statesOnNvme = ev.nvmeBytesPerNode > 0;
  if (ev.hostBytesPerNode > 0) {
    const bool activations = plan.offload.activationLayers > 0;
    const bool statesInHost = !statesOnNvme && (plan.offload.optimizerFraction > 0 || plan.offload.paramsFraction > 0);
    const std::string what = !activations ? "offloaded states" : statesInHost ? "offloaded states and activations" : "offloaded activations";
    out << "host      " << formatBytes(ev.hostBytesPerNode) << " of " << what << " per node"
        << (plan.cluster.hostMemoryBytes > 0 ? " in " + formatBytes(plan.cluster.hostMemoryBytes) + " of host memory (90% usable): " +
                                                   (ev.hostMemoryFits ? "fits" : activations ? "DOES NOT FIT; fewer offloaded layers or more GPUs"
                                                                                : "DOES NOT FIT; offload.target nvme or more GPUs")
                                             : " (the cluster file gives no host_memory_GiB: not judged)")
        << "\n";
  }
  if (statesOnNvme) {
    out << "nvme      " << formatBytes(ev.nvmeBytesPerNode) << " of offloaded states per node on "
        << formatBytes(plan.cluster.nvmeCapacityBytes) << " of NVMe: "
        << (ev.nvmeFits ? "fits" : "DOES NOT FIT") << "\n";
  }
  out << renderBreakdown(ev);
  return out.str();
}

// With --plan the plan comes from the file: options that would change it are refused.
Result<void> rejectPlanEdits(const Args& args) {
  static const std::set<std::string> kOutputOptions = {
      "plan", "json", "out", "simulate", "timeline", "costdb", "explain", "ops", "calibration",
      "train-tokens", "price-per-gpu-hour", "deadline-days"};
  for (const auto& spec : evaluateOptions()) {
    if (!kOutputOptions.contains(spec.name) && args.has(spec.name)) {
      return fail(Error::badInput("--" + spec.name + " cannot be combined with --plan (edit the plan file instead)"));
    }
  }
  return {};
}

// A per-operator plan (colo-plan autoparallel --out) is re-costed operator by operator.
int printOperatorPlanFile(const Plan& plan, const std::string& file, const Args& args, std::ostream& out,
                          std::ostream& err) {
  auto op = planner::evaluateOperatorPlan(plan, file);
  if (!op) return reportError(op.error(), err);
  if (args.has("json")) {
    out << op->toJson().dump(2) << "\n";
    return 0;
  }
  out << "plan      " << file << ": " << plan.model.name() << " on " << clusterLabel(plan.cluster)
      << ", per-operator plan (the degree fields: tp " << plan.parallel.tp << " pp " << plan.parallel.pp << " dp "
      << plan.parallel.dp << (op->runnable ? ", its equivalent" : ", Megatron's split beside it") << ")\n";
  printOperatorPlan(*op, out);
  if (plan.execution.unfused.any()) {
    out << "note      the operator-level costs use fused elementwise kernels: execution.unfused_kernels ("
        << unfusedKernelsLabel(plan.execution.unfused) << ") is not applied to them\n";
  }
  return 0;
}

// Everything one evaluation prints, computed before anything is printed.
struct EvaluateReport {
  Plan plan;
  costmodel::Evaluation evaluation;
  std::optional<costmodel::RunCalibration> calibration;
  planner::TrainingBudget budget;
  std::optional<costmodel::Timeline> timeline;
  std::optional<std::vector<costmodel::Evaluator::OpTime>> ops;
};

Json reportJson(const EvaluateReport& r) {
  Json j = r.evaluation.toJson();
  if (r.calibration) {
    j["calibration_runs"] = r.calibration->toJson();
  } else {
    j["error_band"] = costmodel::bandsToJson(costmodel::bandsOf(r.plan, r.evaluation), r.evaluation);
  }
  if (r.ops) {
    j["ops"] = Json::array();
    for (const auto& o : *r.ops) {
      j["ops"].push_back({{"block", o.block}, {"count", o.count}, {"op", o.op}, {"kind", o.kind},
                          {"forward_s", o.forwardSeconds}, {"backward_s", o.backwardSeconds}});
    }
  }
  if (r.budget.enabled()) j["training"] = planner::trainingCost(r.plan, r.evaluation, r.budget).toJson();
  if (r.timeline) {
    j["simulated"] = {{"pipeline_s", r.timeline->makespanSeconds}, {"bubble_fraction", r.timeline->bubbleFraction},
                      {"events", r.timeline->events.size()}};
  }
  return j;
}

void printReport(const EvaluateReport& r, const costmodel::CostDatabase* costDb, bool explain, std::ostream& out) {
  const auto& ev = r.evaluation;
  out << renderEvaluation(r.plan, ev, r.calibration ? &*r.calibration : nullptr);
  if (r.budget.enabled()) {
    const auto cost = planner::trainingCost(r.plan, ev, r.budget);
    out << "training  " << formatCount(r.budget.trainTokens) << " tokens on " << r.plan.cluster.totalGpus() << " GPUs"
        << (r.budget.pricePerGpuHour > 0 ? " at $" + formatFixed(r.budget.pricePerGpuHour, 2) + "/GPU-hour" : "")
        << ": " << formatCount(cost.steps) << " steps, " << cost.describe(r.budget) << "\n";
  }
  if (costDb && !explain) {
    out << "costdb    " << costDb->path()
        << (ev.calibration.costDbDevice.empty() ? " (no device of it matches the cluster's GPU: nothing measured is used)"
                                                : " (device \"" + ev.calibration.costDbDevice + "\")")
        << ": GEMM shapes timed " << ev.gemmExact << " exactly, "
        << ev.gemmInterpolated << " from the nearest measured shape, " << ev.gemmRoofline
        << " by the roofline (--explain for every source)\n";
  }
  if (explain) out << renderSources(r.plan, ev);
  out << publishedRunsOf(r.plan);
  if (r.ops) out << renderOps(*r.ops);
  if (r.timeline) {
    out << "timeline  simulated pipeline " << seconds(r.timeline->makespanSeconds) << " (closed form "
        << seconds(ev.pipelineSeconds) << ", before the data-parallel/optimizer tail of "
        << seconds(ev.stepSeconds - ev.pipelineSeconds) << "), bubble "
        << formatFixed(100 * r.timeline->bubbleFraction, 1) << "% of the busiest stage's span\n"
        << "          F forward, B backward, R recompute, W weight gradients, c exposed communication, . idle (bubble)\n"
        << r.timeline->renderAscii(100);
  }
}

// Evaluates the plan and gathers what the options ask for beside it; writes --out and --timeline.
Result<EvaluateReport> evaluateWithExtras(Plan plan, const Args& args, const costmodel::CostDatabase* costDb) {
  auto budget = budgetOption(args);
  if (!budget) return fail(budget.error());
  auto evaluation = costmodel::evaluatePlan(plan, costDb);
  if (!evaluation) return fail(toOptionError(evaluation.error()));
  EvaluateReport r{std::move(plan), std::move(*evaluation), std::nullopt, *budget, std::nullopt, std::nullopt};
  if (const auto file = args.value("calibration")) {
    auto loaded = loadCalibration(*file, r.plan.cluster);
    if (!loaded) return fail(loaded.error());
    r.calibration = *loaded;
    r.calibration->apply(r.evaluation);
  }
  if (const auto file = args.value("out")) {
    Plan annotated = r.plan;  // its command stays the one that made it
    planner::annotate(annotated, r.evaluation, annotated.provenance.command, costDb ? costDb->hash() : "");
    if (auto written = writeJsonFileAtomic(*file, planToJson(annotated)); !written) return fail(written.error());
  }
  if (args.has("simulate") || args.has("timeline")) {
    auto simulated = costmodel::simulateSchedule(costmodel::scheduleInputOf(r.plan, r.evaluation));
    if (!simulated) return fail(simulated.error());
    r.timeline = std::move(*simulated);
    if (const auto file = args.value("timeline")) {
      if (auto written = writeJsonFileAtomic(*file, r.timeline->toJson()); !written) return fail(written.error());
    }
  }
  if (args.has("ops")) {
    auto times = costmodel::opTimesOf(r.plan, costDb);
    if (!times) return fail(toOptionError(times.error()));
    r.ops = std::move(*times);
  }
  return r;
}

constexpr const char* kEvaluateUsage =
    "usage: colo-plan evaluate --model M --cluster C [--gpus N] --tp T --pp P --dp D [--cp C] [--ep E] [--etp T]\n"
    "         [--vpp V] [--sp] --mbs B --gbs G [--seq-len S] [--zero 0|1|2|3] [--optimizer adamw|lamb|lars] [--recompute none|selective|full|op]\n"
    "         [--schedule gpipe|1f1b|interleaved|zb] [--precision bf16|fp16|fp8|fp4|fp32]\n"
    "         [--float8-recipe transformer_engine|mxfp8|tensorwise|rowwise|rowwise_with_gw_hp] [--quantized-params] [--json]\n"
    "       colo-plan evaluate --plan plan.json [--json]\n\n"
    "Predicts the step time and per-GPU memory of one plan, with where the time and memory go.\n\n";

}  // namespace

int runEvaluate(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  auto args = Args::parse(argv, evaluateOptions());
  if (!args) return reportError(args.error(), err);
  if (args->has("help")) {
    out << kEvaluateUsage << describeOptions(evaluateOptions());
    return 0;
  }
  if (!args->positional().empty()) {
    return reportError(Error::badInput("unexpected argument \"" + args->positional().front() + "\""), err);
  }
  std::optional<costmodel::CostDatabase> costDb;
  if (const auto dbFile = args->value("costdb")) {
    auto file = resolveLibraryFile(LibraryKind::kCostDbs, *dbFile);  // a path, or a shipped database by name
    if (!file) return reportError(Error::badInput("--costdb: " + file.error().message), err);
    auto opened = costmodel::CostDatabase::open(*file);
    if (!opened) return reportError(opened.error(), err);
    costDb = std::move(*opened);
  }
  Plan plan;
  if (const auto file = args->value("plan")) {
    if (auto allowed = rejectPlanEdits(*args); !allowed) return reportError(allowed.error(), err);
    auto loaded = loadPlan(*file);
    if (!loaded) return reportError(loaded.error(), err);
    plan = std::move(*loaded);
    if (plan.operatorPlan.is_object()) return printOperatorPlanFile(plan, *file, *args, out, err);
    // A plan predicted with a cost database is re-costed with another source of figures only on purpose:
    // say so, since its stored predictions will not be reproduced.
    const std::string& used = plan.provenance.costDbHash;
    const std::string now = costDb ? costDb->hash() : "";
    if (!used.empty() && used != now) {
      err << "colo-plan: note: " << *file << " was predicted with a cost database (hash " << used << "); this evaluation uses "
          << (costDb ? "another (hash " + now + ")" : std::string("none (--costdb DB to use it)")) << ", so its figures can differ\n";
    }
  } else {
    auto built = planFromOptions(*args, argv);
    if (!built) return reportError(built.error(), err);
    plan = std::move(*built);
    if (auto valid = validatePlan(plan); !valid) return reportError(toOptionError(valid.error()), err);
  }
  const costmodel::CostDatabase* db = costDb ? &*costDb : nullptr;
  auto report = evaluateWithExtras(std::move(plan), *args, db);
  if (!report) return reportError(report.error(), err);
  if (args->has("json")) {
    out << reportJson(*report).dump(2) << "\n";
  } else {
    printReport(*report, db, args->has("explain"), out);
  }
  return 0;
}

}  // namespace colo::app
