// colo-bench-evaluate: how many plans per second the cost model evaluates on one core (closed form),
// and how long a full event-level schedule simulation takes. Usage: colo-bench-evaluate [MODEL] [CLUSTER]
// [GPUS] (defaults: gpt3-175b, dgx-a100-80gb-x128, 1024).
#include <chrono>
#include <cstdlib>
#include <iostream>

#include "colo/core/library.h"
#include "colo/core/units.h"
#include "colo/costmodel/evaluator.h"
#include "colo/costmodel/timeline.h"

using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  if (argc > 1 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::cout << "usage: colo-bench-evaluate [MODEL] [CLUSTER] [GPUS]   (defaults: gpt3-175b dgx-a100-80gb-x128 1024)\n\n"
                 "Plans per second the closed-form cost model evaluates on one core, and the time of one event-level\n"
                 "schedule simulation.\n";
    return 0;
  }
  const std::string modelName = argc > 1 ? argv[1] : "gpt3-175b";
  const std::string clusterName = argc > 2 ? argv[2] : "dgx-a100-80gb-x128";
  const std::int64_t gpus = argc > 3 ? std::atoll(argv[3]) : 1024;
  auto modelFile = colo::resolveLibraryFile(colo::LibraryKind::kModels, modelName);
  auto clusterFile = colo::resolveLibraryFile(colo::LibraryKind::kClusters, clusterName);
  if (!modelFile || !clusterFile) {
    std::cerr << "colo-bench-evaluate: unknown model or cluster\n";
    return 2;
  }
  auto model = colo::loadModel(*modelFile);
  auto cluster = colo::loadCluster(*clusterFile);
  if (!model || !cluster) {
    std::cerr << "colo-bench-evaluate: " << (model ? cluster.error() : model.error()).toString() << "\n";
    return 2;
  }
  auto scaled = colo::scaleCluster(*cluster, gpus);
  if (!scaled) {
    std::cerr << "colo-bench-evaluate: " << scaled.error().toString() << "\n";
    return 2;
  }
  const std::int64_t seq = model->defaultSeqLen();
  const auto setupStart = Clock::now();
  auto evaluator = colo::costmodel::Evaluator::create(*model, *scaled, seq);
  const double setup = std::chrono::duration<double>(Clock::now() - setupStart).count();
  if (!evaluator) {
    std::cerr << "colo-bench-evaluate: " << evaluator.error().toString() << "\n";
    return 2;
  }

  // A spread of valid plans: tp x pp x micro-batch x recompute x ZeRO x schedule.
  std::vector<colo::Plan> plans;
  const std::int64_t layers = model->numLayers();
  const std::int64_t heads = model->spec ? model->spec->numAttentionHeads : 1;
  for (std::int64_t tp : {1, 2, 4, 8}) {
    if (heads % tp) continue;
    for (std::int64_t pp : {1, 2, 4, 8, 16, 32}) {
      if (layers % pp || gpus % (tp * pp)) continue;
      for (std::int64_t mbs : {1, 2, 4}) {
        for (auto policy : {colo::RecomputePolicy::kNone, colo::RecomputePolicy::kSelective, colo::RecomputePolicy::kFull}) {
          for (int zero : {0, 1}) {
            colo::Plan p;
            p.parallel.tp = tp;
            p.parallel.pp = pp;
            p.parallel.dp = gpus / (tp * pp);
            p.parallel.sequenceParallel = tp > 1;
            p.microBatchSize = mbs;
            p.globalBatchSize = mbs * p.parallel.dp * 16;
            p.seqLen = seq;
            p.zeroStage = zero;
            p.stages = colo::uniformStages(layers, pp, policy);
            plans.push_back(p);
          }
        }
      }
    }
  }
  // Warm up, then time a fixed number of evaluations.
  double sink = 0;
  for (const auto& p : plans) sink += evaluator->evaluate(p)->stepSeconds;
  const std::size_t rounds = std::max<std::size_t>(1, 400000 / plans.size());
  const auto start = Clock::now();
  std::size_t evaluated = 0;
  for (std::size_t r = 0; r < rounds; ++r) {
    for (const auto& p : plans) {
      auto ev = evaluator->evaluate(p);
      sink += ev->stepSeconds;
      ++evaluated;
    }
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  // The same plans in an order where each follows one of another layer configuration (micro-batch,
  // degrees), so the evaluator forms every plan's layer costs afresh: above, the six recompute and
  // ZeRO variants of a configuration follow each other, as the search asks for them, and share them.
  std::vector<std::size_t> order;
  for (std::size_t variant = 0; variant < 6; ++variant) {
    for (std::size_t i = variant; i < plans.size(); i += 6) order.push_back(i);
  }
  const auto freshStart = Clock::now();
  std::size_t freshEvaluated = 0;
  for (std::size_t r = 0; r < rounds; ++r) {
    for (const std::size_t i : order) {
      auto ev = evaluator->evaluate(plans[i]);
      sink += ev->stepSeconds;
      ++freshEvaluated;
    }
  }
  const double freshElapsed = std::chrono::duration<double>(Clock::now() - freshStart).count();

  // One full simulation of the largest plan's schedule.
  colo::Plan big = plans.back();
  big.globalBatchSize = big.microBatchSize * big.parallel.dp * 64;
  auto ev = evaluator->evaluate(big);
  const auto simStart = Clock::now();
  auto timeline = colo::costmodel::simulateSchedule(colo::costmodel::scheduleInputOf(big, *ev));
  const double simulation = std::chrono::duration<double>(Clock::now() - simStart).count();

  std::cout << "model " << modelName << ", cluster " << clusterName << " at " << gpus << " GPUs, seq " << seq << "\n";
  std::cout << "evaluator setup (op graph digest): " << colo::formatFixed(setup * 1e3, 2) << " ms\n";
  std::cout << "closed form: " << evaluated << " evaluations of " << plans.size() << " distinct plans in "
            << colo::formatFixed(elapsed, 3) << " s = " << colo::formatFixed(static_cast<double>(evaluated) / elapsed, 0)
            << " plans/s on one core (" << colo::formatFixed(elapsed / static_cast<double>(evaluated) * 1e6, 2)
            << " us each)\n";
  std::cout << "closed form, each plan after one of another layer configuration: "
            << colo::formatFixed(static_cast<double>(freshEvaluated) / freshElapsed, 0) << " plans/s ("
            << colo::formatFixed(freshElapsed / static_cast<double>(freshEvaluated) * 1e6, 2) << " us each)\n";
  if (timeline) {
    std::cout << "event simulation: pp " << big.parallel.pp << ", " << ev->microBatches << " micro-batches, "
              << timeline->events.size() << " events in " << colo::formatFixed(simulation * 1e3, 2) << " ms\n";
  }
  return sink > 0 ? 0 : 1;
}
