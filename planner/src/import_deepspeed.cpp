// A DeepSpeed config with its Megatron-DeepSpeed launch read as a colo plan: the launch's arguments by the
// Megatron-LM reader (import.cpp), then what the config and Megatron-DeepSpeed's own defaults change.
#include <algorithm>

#include "colo/planner/import.h"
#include "import_common.h"

namespace colo::planner {

using detail::launchArguments;
using detail::launchPrecision;
using detail::Reader;

Result<Plan> importDeepSpeed(const Json& config, const std::string& arguments, const ImportContext& context) {
  if (!config.is_object()) return fail(Error::badInput("a DeepSpeed config is a JSON object"));
  auto plan = importMegatron(arguments, context);
  if (!plan) return fail(plan.error());
  Plan p = *plan;
  auto integerKey = [&](const char* key, std::int64_t fallback) -> Result<std::int64_t> {
    // "auto" (Hugging Face's Trainer and Accelerate fill it in from their own arguments): the launch's.
    if (!config.contains(key) || config[key] == "auto") return fallback;
    if (!config[key].is_number_integer() || config[key].get<std::int64_t>() <= 0) {
      return fail(Error::badInput(std::string(key) + ": expected a positive integer, got " + config[key].dump()));
    }
    return config[key].get<std::int64_t>();
  };
  COLO_TRY(micro, integerKey("train_micro_batch_size_per_gpu", p.microBatchSize));
  COLO_TRY(batch, integerKey("train_batch_size", p.globalBatchSize));
  COLO_TRY(steps, integerKey("gradient_accumulation_steps", batch / std::max<std::int64_t>(1, micro * p.parallel.dp)));
  if (batch != micro * steps * p.parallel.dp) {
    return fail(Error::badInput("train_batch_size " + std::to_string(batch) + " != train_micro_batch_size_per_gpu " + std::to_string(micro) +
                                " x gradient_accumulation_steps " + std::to_string(steps) + " x data-parallel " +
                                std::to_string(p.parallel.dp) + " (DeepSpeed's batch check)"));
  }
  p.microBatchSize = micro;
  p.globalBatchSize = batch;
  if (config.contains("zero_optimization")) {
    const Json& z = config["zero_optimization"];
    p.zeroStage = z.is_boolean() ? (z.get<bool>() ? 1 : 0) : z.value("stage", 0);
    if (z.is_object() && z.contains("offload_optimizer") && z["offload_optimizer"].is_object()) {
      p.offload.optimizerFraction = z["offload_optimizer"].value("ratio", 1.0);
    }
  }
  const bool bf16 = config.contains("bf16") && config["bf16"].value("enabled", false);
  const bool fp16 = config.contains("fp16") && config["fp16"].value("enabled", false);
  p.precision = bf16 ? DType::kBf16 : fp16 ? DType::kFp16 : p.precision;
  // DeepSpeed's BF16 optimizer sums micro-batch gradients into fp32 copies; with fp16 into the .grad.
  p.execution.gradAccumulation = bf16 ? GradAccumulation::kFp32Copy : GradAccumulation::kAutograd;
  // Megatron-DeepSpeed's own linears (its --transformer-impl defaults to local) reduce every bias
  // gradient apart and keep no placeholder weight gradients.
  auto parsed = launchArguments(arguments);
  if (!parsed) return fail(parsed.error());
  const Reader r{*parsed, "Megatron-DeepSpeed argument"};
  p.execution.fusedBiasGrad = r.text("--transformer-impl").value_or("local") == "transformer_engine";
  p.execution.teDummyWgrads = false;
  // Its attention is CoreAttention's unfused softmax unless a --use-flash-attn* switch picks the
  // flash-attn package (v1, v2, its Triton kernel) or DeepSpeed's builder (megatron/arguments.py,
  // megatron/model/transformer.py); and it has no check of the gradients for NaN (Megatron-LM's
  // check_for_nan_in_loss_and_grad came after the fork).
  const bool flash = r.has("--use-flash-attn") || r.has("--use-flash-attn-v1") || r.has("--use-flash-attn-v2") ||
                     r.has("--use-flash-attn-triton") || r.has("--use-flash-attn-builder");
  p.execution.flashAttention = flash;
  p.execution.flashAttention2 = flash && r.has("--use-flash-attn-v2");
  p.execution.gradNanCheck = false;
  p.execution.gradReduceBf16 = false;  // DeepSpeed's optimizer keeps its own gradient copies
  if (!p.execution.fusedBiasGrad && quantizedGemms(p.precision)) p.precision = launchPrecision(r, false);
  p.execution.overlapGradReduce = config.contains("zero_optimization") && config["zero_optimization"].is_object() &&
                                  config["zero_optimization"].value("overlap_comm", false);
  // Megatron-DeepSpeed has no rotary or SwiGLU fusion: --swiglu runs F.silu(x[0]) * x[1] and its rotary
  // embedding t * cos + rotate_half(t) * sin, eager (megatron/model/transformer.py, rotary_pos_embedding.py).
  // (Only for the ops the model has: a GPT-3 has neither, and its plan says so.)
  const ModelSpec* spec = p.model.spec ? &*p.model.spec : nullptr;
  p.execution.unfused.rotary = spec && spec->positionEmbedding == PositionEmbedding::kRope;
  p.execution.unfused.gatedActivation = spec && spec->gatedMlp();
  p.name = p.model.name() + " (imported from a DeepSpeed config)";
  if (auto valid = validatePlan(p); !valid) return fail(valid.error());
  return p;
}

}  // namespace colo::planner
