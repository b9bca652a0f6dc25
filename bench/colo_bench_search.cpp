// colo-bench-search: the planner's speed targets. Searches GPT-3 175B on 1,024 A100s (gbs 1536) and
// LLaMA-3 405B on 16,384 H100s (gbs 2048) over the full space, then each 2025-26 model family of the
// library on its library cluster (target: under 1 s each), and prints time and candidates/s.
#include <algorithm>
#include <iostream>

#include "colo/core/library.h"
#include "colo/core/units.h"
#include "colo/planner/search.h"

namespace {

// `gpus` 0: the cluster as the library gives it. `seconds` gets the search's time.
int bench(const std::string& modelName, const std::string& clusterName, std::int64_t gpus, std::int64_t gbs, double target,
          double* seconds = nullptr) {
  auto model = colo::loadModel(*colo::resolveLibraryFile(colo::LibraryKind::kModels, modelName));
  auto cluster = colo::loadCluster(*colo::resolveLibraryFile(colo::LibraryKind::kClusters, clusterName));
  if (!model || !cluster) return 2;
  auto scaled = colo::scaleCluster(*cluster, gpus > 0 ? gpus : cluster->totalGpus());
  gpus = scaled ? scaled->totalGpus() : gpus;
  if (!scaled) return 2;
  colo::planner::SearchOptions options;
  options.globalBatchSize = gbs;
  auto r = colo::planner::search(*model, *scaled, options);
  if (!r) {
    std::cerr << r.error().toString() << "\n";
    return 1;
  }
  const auto& s = r->stats;
  if (seconds) *seconds = s.seconds;
  std::cout << modelName << " on " << gpus << " x " << scaled->gpu.name << ", gbs " << gbs << ": " << s.generated
            << " generated, " << s.costed << " costed (" << s.evaluated << " evaluations), " << s.feasible << " fit, in "
            << colo::formatFixed(s.seconds, 3) << " s = " << colo::formatCount(static_cast<double>(s.generated) / s.seconds)
            << " candidates/s, " << colo::formatCount(static_cast<double>(s.evaluated) / s.seconds)
            << " evaluations/s (target: under " << target << " s)";
  if (r->feasible()) {
    std::cout << "; best " << r->top.front().plan.name << ", " << colo::formatFixed(r->top.front().evaluation.stepSeconds, 3)
              << " s/step";
  }
  std::cout << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {
    const std::string a = argv[1];
    std::cout << "usage: colo-bench-search\n\nSearches GPT-3 175B on 1,024 A100s (gbs 1536, target under 1 s) and Llama 3 405B on\n"
                 "16,384 H100s (gbs 2048, target under 5 s) over the full space, then each 2025-26 model family\n"
                 "of the library on its library cluster (target under 1 s each); prints time and candidates/s.\n";
    if (a == "--help" || a == "-h") return 0;
    std::cerr << "colo-bench-search: error: unexpected argument \"" << a << "\"\n";
    return 2;
  }
  int rc = bench("gpt3-175b", "dgx-a100-80gb-x128", 1024, 1536, 1.0);
  rc |= bench("llama3-405b", "dgx-h100-x2048", 16384, 2048, 5.0);
  // The families of 2025-26, each on the library cluster of its size (as colo-bench-autoparallel).
  struct Family {
    const char* model;
    const char* cluster;
    std::int64_t gbs;
  };
  const Family families[] = {
      {"deepseek-v3", "dgx-h100-x2048", 4096}, {"qwen3-8b", "dgx-h100", 512},         {"qwen3-30b-a3b", "dgx-h100-x64", 1024},
      {"qwen3-235b-a22b", "dgx-h100-x64", 2048}, {"gemma-3-27b", "dgx-h100-x64", 1024}, {"llama4-scout", "dgx-h100-x64", 2048},
      {"gpt-oss-120b", "dgx-h100-x64", 2048},  {"phi3-mini", "dgx-h100", 512},        {"mixtral-8x22b", "dgx-h100-x64", 2048},
  };
  double slowest = 0;
  std::string which;
  for (const auto& f : families) {
    double seconds = 0;
    rc |= bench(f.model, f.cluster, 0, f.gbs, 1.0, &seconds);
    if (seconds > slowest) {
      slowest = seconds;
      which = f.model;
    }
  }
  std::cout << "slowest family: " << which << ", " << colo::formatFixed(slowest, 3) << " s (target: under 1 s)\n";
  return rc;
}
