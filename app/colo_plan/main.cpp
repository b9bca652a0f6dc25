// colo-plan: headless planning for CI and scripts. Exit codes: 0 ok, 2 bad input, 3 infeasible
// (where asked to fail on it), 1 internal error.
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "colo/core/version.h"
#include "commands.h"

namespace {

void usage(std::ostream& out) {
  out << "usage: colo-plan <command> [options]\n\n"
         "commands:\n"
         "  inspect    describe a model (params, FLOPs, memory, ops) and a cluster\n"
         "  search     find the fastest plans that fit, with reasons\n"
         "  autoparallel  per-operator sharding, recompute and offload solved together on a device mesh\n"
         "  evaluate   predict step time and per-GPU memory of one plan\n"
         "  compare    colo's best plan beside a Megatron-style, ZeRO-3 or DDP baseline\n"
         "  check      fail (exit 4) when a saved plan misses an MFU, memory or step-time bound\n"
         "  export     a plan as Megatron-LM arguments, DeepSpeed JSON, Colossal-AI code, torchrun/SLURM script\n"
         "  import     the job you run (Megatron-LM arguments, DeepSpeed config, Colossal-AI plugin, torchtitan TOML) as a plan\n"
         "  validate   check model, cluster and plan files\n"
         "  list       show the shipped model and cluster libraries\n\n"
         "`colo-plan <command> --help` shows a command's options. Version "
      << colo::kVersion << ".\n";
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
      usage(args.empty() ? std::cerr : std::cout);
      return args.empty() ? 2 : 0;
    }
    if (args[0] == "--version") {
      std::cout << "colo-plan " << colo::kVersion << "\n";
      return 0;
    }
    const std::vector<std::string> rest(args.begin() + 1, args.end());
    if (args[0] == "inspect") return colo::app::runInspect(rest, std::cout, std::cerr);
    if (args[0] == "search") return colo::app::runSearch(rest, std::cout, std::cerr);
    if (args[0] == "autoparallel") return colo::app::runAutoParallel(rest, std::cout, std::cerr);
    if (args[0] == "evaluate") return colo::app::runEvaluate(rest, std::cout, std::cerr);
    if (args[0] == "compare") return colo::app::runCompare(rest, std::cout, std::cerr);
    if (args[0] == "check") return colo::app::runCheck(rest, std::cout, std::cerr);
    if (args[0] == "export") return colo::app::runExport(rest, std::cout, std::cerr);
    if (args[0] == "import") return colo::app::runImport(rest, std::cout, std::cerr);
    if (args[0] == "validate") return colo::app::runValidate(rest, std::cout, std::cerr);
    if (args[0] == "list") return colo::app::runList(rest, std::cout, std::cerr);
    std::cerr << "colo-plan: error: unknown command \"" << args[0] << "\" (commands: search, autoparallel, evaluate, compare, check, export, import, inspect, validate, list)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "colo-plan: internal error: " << e.what() << "\n";
    return 1;
  }
}
