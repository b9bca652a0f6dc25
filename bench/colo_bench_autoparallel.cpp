// colo-bench-autoparallel: the operator-level solver's speed target (under 1 s on one core for every
// library model on its library cluster) and what the joint solve gains over Megatron's split there.
// Colossal-AI's reported figure for its ILP sharding solver, for comparison: minutes for a GPT-style
// model of a few billion parameters on 8 GPUs, growing with the layer count (its issue #2853 calls it
// "unacceptable for LLMs").
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "colo/core/library.h"
#include "colo/core/units.h"
#include "colo/planner/autoparallel.h"

namespace {

struct Case {
  const char* model;
  const char* cluster;
  std::int64_t gbs;
};

// Each library model on the library cluster of the size it is trained on.
const std::vector<Case> kCases = {
    {"tiny-gpt", "dgx-a100-80gb", 64},          {"tiny-llama", "dgx-a100-80gb", 64},
    {"tiny-moe", "dgx-a100-80gb", 64},          {"gpt2-small", "dgx-a100-80gb", 512},
    {"gpt2-medium", "dgx-a100-80gb", 512},      {"gpt2-large", "dgx-a100-80gb", 512},
    {"gpt2-xl", "dgx-a100-80gb", 512},          {"bert-large", "dgx-a100-80gb", 1024},
    {"vit-large", "dgx-a100-80gb", 4096},       {"gpt3-1.3b", "dgx-a100-80gb", 512},
    {"gpt3-2.7b", "dgx-a100-80gb", 512},        {"gpt3-6.7b", "dgx-a100-80gb", 1024},
    {"gpt3-13b", "dgx-a100-80gb-x16", 1024},    {"gpt3-175b", "dgx-a100-80gb-x16", 1536},
    {"llama2-7b", "dgx-a100-80gb", 1024},       {"llama2-13b", "dgx-a100-80gb-x16", 1024},
    {"llama2-70b", "dgx-a100-80gb-x16", 1024},  {"llama3-8b", "dgx-h100", 512},
    {"llama3-70b", "dgx-h100-x64", 1024},       {"llama3-405b", "dgx-h100-x2048", 2048},
    {"phi3-mini", "dgx-h100", 512},             {"qwen3-8b", "dgx-h100", 512},
    {"qwen3-30b-a3b", "dgx-h100-x64", 1024},    {"qwen3-235b-a22b", "dgx-h100-x64", 2048},
    {"mixtral-8x7b", "dgx-h100-x64", 1024},     {"mixtral-8x22b", "dgx-h100-x64", 2048},
    {"deepseek-v3", "dgx-h100-x2048", 4096},    {"gemma-3-27b", "dgx-h100-x64", 1024},
    {"gpt-oss-120b", "dgx-h100-x64", 2048},     {"llama4-scout", "dgx-h100-x64", 2048},
};

}  // namespace

int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";
  std::printf("%-16s %-20s %6s %6s %9s %8s %12s %12s %9s  %s\n", "model", "cluster", "gpus", "gbs", "solve s", "solves",
              "joint step", "megatron", "speedup", "joint layout");
  double worst = 0;
  int rc = 0;
  for (const auto& c : kCases) {
    if (!only.empty() && only != c.model) continue;
    auto model = colo::loadModel(*colo::resolveLibraryFile(colo::LibraryKind::kModels, c.model));
    auto cluster = colo::loadCluster(*colo::resolveLibraryFile(colo::LibraryKind::kClusters, c.cluster));
    if (!model || !cluster) {
      std::cerr << c.model << ": cannot load the model or cluster\n";
      rc = 2;
      continue;
    }
    colo::planner::AutoParallelOptions options;
    options.globalBatchSize = c.gbs;
    auto r = colo::planner::autoParallel(*model, *cluster, options);
    if (!r) {
      std::printf("%-16s %-20s %6lld %6lld  %s\n", c.model, c.cluster, static_cast<long long>(cluster->totalGpus()),
                  static_cast<long long>(c.gbs), r.error().toString().c_str());
      continue;
    }
    worst = std::max(worst, r->solveSeconds);
    const std::string speedup = r->megatronFits ? colo::formatFixed(r->megatron.stepSeconds / r->joint.stepSeconds, 3) + "x" : "(no fit)";
    std::printf("%-16s %-20s %6lld %6lld %9.3f %8lld %11.3fs %11.3fs %9s  %lld x %s, mbs %lld\n", c.model, c.cluster,
                static_cast<long long>(cluster->totalGpus()), static_cast<long long>(c.gbs), r->solveSeconds,
                static_cast<long long>(r->blockSolves), r->joint.stepSeconds, r->megatronFits ? r->megatron.stepSeconds : 0.0,
                speedup.c_str(), static_cast<long long>(r->joint.pipelineStages), r->joint.mesh.c_str(),
                static_cast<long long>(r->joint.microBatchSize));
  }
  std::printf("slowest solve: %.3f s (target: under 1 s on one core)\n", worst);
  return rc;
}
