// colo-plan import and export checks: a launch the user hands in (Megatron-LM arguments, a torchtitan
// TOML, a Colossal-AI plugin call; the first byte picks which), read into a plan on a fixed cluster and
// model, the same text checked as Megatron-LM arguments and as a launch script, and read as a script (its
// shell variables, its launcher's GPU count, a hostfile). Every refusal must be
// a bad-input error (exit 2), never a crash.
#include <cstdlib>

#include "colo/core/model.h"
#include "colo/planner/export_check.h"
#include "colo/planner/import.h"
#include "colo/planner/launch.h"
#include "fuzz_support.h"

namespace {

struct Fixed {
  colo::ClusterSpec cluster;
  colo::Model model;
  colo::Json megatron, torchrun, sbatch, colossalai;
};

const Fixed& fixed() {
  static const Fixed f = [] {
    const std::string data = std::string(COLO_SOURCE_DIR) + "/data/";
    auto cluster = colo::loadCluster(data + "clusters/dgx-h100.json");
    auto model = colo::loadModel(data + "models/tiny-llama.json");
    auto json = [&](const char* name) { return *colo::readJsonFile(data + "export-schemas/" + name + ".json"); };
    if (!cluster || !model) std::abort();
    return Fixed{*cluster, *model, json("megatron-lm"), json("torchrun"), json("sbatch"), json("colossalai")};
  }();
  return f;
}

void requireBadInput(const colo::Error& error) {
  if (colo::exitCodeFor(error.code) != 2) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const Fixed& f = fixed();
  const std::string text = colo::fuzz::text(data + 1, size - 1);
  const int which = data[0] % 4;
  colo::planner::ImportContext withModel{f.cluster, f.model, 0, 0};
  colo::planner::ImportContext withoutModel{f.cluster, std::nullopt, 0, 0};
  colo::Result<colo::Plan> plan = colo::fail(colo::Error::badInput("none"));
  switch (which) {
    case 0: plan = colo::planner::importMegatron(text, withModel); break;
    case 1: plan = colo::planner::importMegatron(text, withoutModel); break;
    case 2: plan = colo::planner::importTorchtitan(text, withModel); break;
    default: plan = colo::planner::importColossalAi(text, withModel); break;
  }
  if (!plan) requireBadInput(plan.error());
  (void)colo::planner::checkMegatronArguments(text, f.megatron, 8);
  (void)colo::planner::checkLaunchScript(text, f.torchrun, f.sbatch);
  (void)colo::planner::checkColossalAiPlugin(text, f.colossalai, 8);
  // The text as a Megatron-Bridge YAML, and as a script: its shell variables, its launcher, a hostfile.
  if (auto bridge = colo::planner::importMegatronBridge(text, withModel); !bridge) requireBadInput(bridge.error());
  if (auto expanded = colo::planner::expandShellVariables(text); !expanded) requireBadInput(expanded.error());
  if (auto facts = colo::planner::launchFacts(text); !facts) requireBadInput(facts.error());
  if (auto slots = colo::planner::hostfileSlots(text); !slots) requireBadInput(slots.error());
  return 0;
}
