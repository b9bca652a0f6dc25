// colo-bench-search: the planner's speed targets. Searches GPT-3 175B on 1,024 A100s (gbs 1536) and
// LLaMA-3 405B on 16,384 H100s (gbs 2048) over the full space and prints time and candidates/s.
#include <iostream>

#include "colo/core/library.h"
#include "colo/core/units.h"
#include "colo/planner/search.h"

namespace {

int bench(const std::string& modelName, const std::string& clusterName, std::int64_t gpus, std::int64_t gbs, double target) {
  auto model = colo::loadModel(*colo::resolveLibraryFile(colo::LibraryKind::kModels, modelName));
  auto cluster = colo::loadCluster(*colo::resolveLibraryFile(colo::LibraryKind::kClusters, clusterName));
  if (!model || !cluster) return 2;
  auto scaled = colo::scaleCluster(*cluster, gpus);
  if (!scaled) return 2;
  colo::planner::SearchOptions options;
  options.globalBatchSize = gbs;
  auto r = colo::planner::search(*model, *scaled, options);
  if (!r) {
    std::cerr << r.error().toString() << "\n";
    return 1;
  }
  const auto& s = r->stats;
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
                 "16,384 H100s (gbs 2048, target under 5 s) over the full space; prints time and candidates/s.\n";
    if (a == "--help" || a == "-h") return 0;
    std::cerr << "colo-bench-search: error: unexpected argument \"" << a << "\"\n";
    return 2;
  }
  int rc = bench("gpt3-175b", "dgx-a100-80gb-x128", 1024, 1536, 1.0);
  rc |= bench("llama3-405b", "dgx-h100-x2048", 16384, 2048, 5.0);
  return rc;
}
