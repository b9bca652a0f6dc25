// colo-plan import: the job a user already runs (Megatron-LM arguments, a DeepSpeed config, a
// Colossal-AI plugin, a torchtitan TOML) as a colo plan on a cluster, evaluated like any plan.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "args.h"
#include "colo/core/library.h"
#include "colo/costmodel/evaluator.h"
#include "colo/planner/import.h"
#include "colo/planner/launch.h"
#include "colo/planner/search.h"
#include "commands.h"

namespace colo::app {
namespace {

Result<std::string> readText(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return fail(Error::io("cannot open", file));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A file the launch names: as given when it exists, else beside the launch file.
std::string besideLaunch(const std::string& named, const std::string& launchFile) {
  namespace fs = std::filesystem;
  if (fs::path(named).is_absolute() || fs::exists(named)) return named;
  const fs::path beside = fs::path(launchFile).parent_path() / named;
  return fs::exists(beside) ? beside.string() : named;
}

// The job's GPU count: --gpus, else what the launcher says (--num_nodes x --num_gpus, --include, a
// hostfile's slots, torchrun's --nnodes x --nproc_per_node). --gpus wins over the launcher, with a note
// naming both: published scripts fix the node count for one node (NUM_NODES=1, "change for multinode")
// or read it from the scheduler (${SLURM_NNODES:-1}). 0: neither says.
Result<std::int64_t> jobGpus(const Args& args, const std::optional<planner::LaunchFacts>& facts, const std::string& launchFile,
                             std::ostream& err) {
  std::int64_t said = facts ? facts->world() : 0;
  std::string how = facts ? facts->describe() : "";
  if (said == 0 && facts && facts->hostfile) {
    const std::string file = besideLaunch(*facts->hostfile, launchFile);
    auto text = readText(file);
    if (!text) return fail(Error::badInput("--hostfile " + *facts->hostfile + ": cannot read it; give the job's GPU count with --gpus"));
    auto slots = planner::hostfileSlots(*text);
    if (!slots) return fail(Error::badInput(file + ": " + slots.error().message));
    said = *slots;
    how = "the hostfile's slots";
  }
  if (!args.has("gpus")) return said;
  auto gpus = args.positiveInteger("gpus", 0);
  if (!gpus) return fail(gpus.error());
  if (said > 0 && *gpus != said) {
    err << "note: --gpus " << *gpus << " replaces the launch's " << how << " = " << said << " GPUs (" << launchFile
        << "): the plan is for " << *gpus << " GPUs\n";
  }
  return *gpus;
}

}  // namespace

namespace {

// The launch as the user wrote it, with shell variables expanded and the launcher's facts read for
// Megatron and DeepSpeed launches (they are shell).
struct Launch {
  std::optional<std::string> file, text;
  std::optional<planner::LaunchFacts> facts;
};

Result<Launch> readLaunch(const Args& args, planner::ImportFormat format) {
  Launch l;
  l.file = args.value("launch");
  if (!l.file) return l;
  auto text = readText(*l.file);
  if (!text) return fail(text.error());
  l.text = *text;
  if (format == planner::ImportFormat::kMegatron || format == planner::ImportFormat::kDeepSpeed) {
    auto expanded = planner::expandShellVariables(*text);
    if (!expanded) return fail(Error::badInput(*l.file + ": " + expanded.error().message));
    l.text = *expanded;
    auto read = planner::launchFacts(*expanded);
    if (!read) return fail(Error::badInput(*l.file + ": " + read.error().message));
    l.facts = *read;
  }
  return l;
}

// What the import takes from the command line: the cluster at the job's size, and the model, batch and
// sequence where the launch does not state them.
Result<planner::ImportContext> importContext(const Args& args, const Launch& launch, std::ostream& err) {
  const auto clusterName = args.value("cluster");
  if (!clusterName) return fail(Error::badInput("missing --cluster (the cluster the job runs on)"));
  auto clusterFile = resolveLibraryFile(LibraryKind::kClusters, *clusterName);
  if (!clusterFile) return fail(clusterFile.error());
  auto cluster = loadCluster(*clusterFile);
  if (!cluster) return fail(cluster.error());
  auto gpus = jobGpus(args, launch.facts, launch.file.value_or(""), err);
  if (!gpus) return fail(gpus.error());
  if (*gpus > 0) {
    auto scaled = scaleCluster(*cluster, *gpus);
    if (!scaled && !args.has("gpus") && launch.file) {
      // The count came from the launcher's options, not from --gpus: say so, and name the file.
      const std::string how = launch.facts && launch.facts->world() > 0 ? launch.facts->describe() : "the hostfile's slots";
      std::string why = scaled.error().message;
      if (why.starts_with("--gpus ")) why.erase(0, 7);
      return fail(Error::badInput(*launch.file + ": the launch asks for " + std::to_string(*gpus) + " GPUs (" + how + "): " + why));
    }
    if (!scaled) return fail(scaled.error());
    cluster = std::move(*scaled);
  }
  planner::ImportContext context;
  context.cluster = *cluster;
  if (const auto m = args.value("model")) {
    auto file = resolveLibraryFile(LibraryKind::kModels, *m);
    if (!file) return fail(file.error());
    auto model = loadModel(*file);
    if (!model) return fail(model.error());
    context.model = std::move(*model);
  }
  auto gbs = args.positiveInteger("gbs", 0);
  if (!gbs) return fail(gbs.error());
  auto seq = args.positiveInteger("seq-len", 0);
  if (!seq) return fail(seq.error());
  context.globalBatchSize = *gbs;
  context.seqLen = *seq;
  return context;
}

// The job read into a plan, and the file it came from (named in errors and the report).
struct Imported {
  Result<Plan> plan = fail(Error::internal("no import"));
  std::string source;
};

Result<Imported> importJob(const Args& args, planner::ImportFormat format, const Launch& launch,
                           const planner::ImportContext& context) {
  Imported out;
  if (format == planner::ImportFormat::kDeepSpeed) {
    std::optional<std::string> configFile = args.value("config");
    if (!configFile && launch.facts && launch.facts->deepspeedConfig) configFile = besideLaunch(*launch.facts->deepspeedConfig, *launch.file);
    const auto argsFile = args.value("args");
    if (!configFile || (!argsFile && !launch.text)) {
      return fail(Error::badInput("deepspeed: give --launch (a launch naming --deepspeed_config) or --config ds.json with --args "
                                  "(Megatron-DeepSpeed's arguments)"));
    }
    auto config = readJsonFile(*configFile);
    if (!config) return fail(config.error());
    std::string arguments;
    if (argsFile) {
      auto text = readText(*argsFile);
      if (!text) return fail(text.error());
      arguments = *text;
    } else {
      arguments = *launch.text;
    }
    out.plan = planner::importDeepSpeed(*config, arguments, context);
    out.source = *configFile;
    return out;
  }
  if (!launch.file) return fail(Error::badInput("missing --launch FILE (the arguments, script or TOML to import)"));
  const std::string& text = *launch.text;
  out.plan = format == planner::ImportFormat::kMegatron         ? planner::importMegatron(text, context)
             : format == planner::ImportFormat::kMegatronBridge ? planner::importMegatronBridge(text, context)
             : format == planner::ImportFormat::kColossalAi     ? planner::importColossalAi(text, context)
                                                                : planner::importTorchtitan(text, context);
  out.source = *launch.file;
  return out;
}

}  // namespace

int runImport(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  const std::vector<OptionSpec> specs{
      {"format", "F", "megatron (pretrain_gpt.py arguments or a launch script), megatron-bridge (its config YAML), deepspeed, colossalai or torchtitan (required)"},
      {"launch", "FILE", "the launch: Megatron-LM arguments or script, a deepspeed/torchrun launch line or script, a Colossal-AI script or a torchtitan TOML (required but for deepspeed with --config and --args)"},
      {"config", "FILE", "deepspeed: the DeepSpeed JSON config (default: the launch's --deepspeed_config, found beside the launch)"},
      {"args", "FILE", "deepspeed: Megatron-DeepSpeed's arguments (default: the launch's own)"},
      {"cluster", "C", "the cluster the job runs on (required): library name or file"},
      {"gpus", "N", "the job's GPU count (scales the cluster; default: what the launcher says, e.g. --num_nodes x --num_gpus; given, it wins over the launcher, with a note)"},
      {"model", "M", "the model, where the launch does not state it: library name or file"},
      {"gbs", "G", "global batch size, where the launch does not state it"},
      {"seq-len", "S", "sequence length, where the launch does not state it"},
      {"out", "FILE", "write the plan (colo.plan/1); then evaluate, compare, search --from-plan and export read it"},
      {"help", "", "show this help"}};
  auto args = Args::parse(argv, specs);
  if (!args) return reportError(args.error(), err);
  if (args->has("help")) {
    out << "usage: colo-plan import --format megatron|megatron-bridge|deepspeed|colossalai|torchtitan --launch FILE --cluster C [--gpus N]\n"
           "         [--model M] [--gbs G] [--seq-len S] [--out plan.json]\n"
           "       colo-plan import --format deepspeed --config ds.json --args megatron-args.txt --cluster C ...\n\n"
           "A launch script's shell variables (NAME=value, $((arithmetic))) are expanded first; the launcher's\n"
           "own options (deepspeed --num_nodes/--num_gpus/--include/--hostfile, torchrun --nnodes/--nproc_per_node)\n"
           "give the job's GPU count, and --deepspeed_config the DeepSpeed config.\n\n"
           "Reads the job you already run into a colo plan and predicts its step time and memory, so that\n"
           "`search --from-plan` can say what would be faster. Settings colo cannot represent are refused by name.\n\n"
        << describeOptions(specs);
    return 0;
  }
  const auto formatName = args->value("format");
  if (!formatName) return reportError(Error::badInput("missing --format (megatron, megatron-bridge, deepspeed, colossalai or torchtitan)"), err);
  auto format = planner::parseImportFormat(*formatName);
  if (!format) return reportError(Error::badInput("--format: " + format.error().message), err);
  auto launch = readLaunch(*args, *format);
  if (!launch) return reportError(launch.error(), err);
  auto context = importContext(*args, *launch, err);
  if (!context) return reportError(context.error(), err);
  auto job = importJob(*args, *format, *launch, *context);
  if (!job) return reportError(job.error(), err);
  Result<Plan>& plan = job->plan;
  const std::string& source = job->source;
  if (!plan) {
    Error e = plan.error();
    if (e.file.empty()) e.file = source;
    return reportError(e, err);
  }
  // A Megatron-Bridge override file leaves its recipe's settings unsaid; the import reads what is
  // missing as Megatron-LM's defaults, which for precision means fp32 training: say so.
  if (*format == planner::ImportFormat::kMegatronBridge && plan->precision == DType::kFp32 && launch->text &&
      launch->text->find("mixed_precision") == std::string::npos) {
    err << "note: " << source << " states no mixed_precision, so the plan trains in fp32 (Megatron-LM's default); an override "
           "file leaves its recipe's precision, distributed optimizer and overlaps unsaid: import the recipe's whole "
           "ConfigContainer (its YAML dump) for them\n";
  }
  // The plan file says how it was made and what colo predicts for it, as search --out writes it.
  std::string command = "colo-plan import";
  for (const auto& a : argv) command += " " + a;
  if (auto ev = costmodel::evaluatePlan(*plan)) {
    planner::annotate(*plan, *ev, command, "");
  } else {
    plan->provenance.command = command;
  }
  const auto outFile = args->value("out");
  if (!outFile) {
    out << planToJson(*plan).dump(2) << "\n";
    return 0;
  }
  if (auto written = writeJsonFileAtomic(*outFile, planToJson(*plan)); !written) return reportError(written.error(), err);
  out << "imported  " << source << " -> " << *outFile << "\n";
  return runEvaluate({"--plan", *outFile}, out, err);
}

}  // namespace colo::app
