// colo-plan import: the job a user already runs (Megatron-LM arguments, a DeepSpeed config, a
// Colossal-AI plugin, a torchtitan TOML) as a colo plan on a cluster, evaluated like any plan.
#include <fstream>
#include <iostream>
#include <sstream>

#include "args.h"
#include "colo/core/library.h"
#include "colo/planner/import.h"
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

}  // namespace

int runImport(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  const std::vector<OptionSpec> specs{
      {"format", "F", "megatron (pretrain_gpt.py arguments or a launch script), deepspeed, colossalai or torchtitan (required)"},
      {"launch", "FILE", "the launch: Megatron-LM arguments, a Colossal-AI script or a torchtitan TOML (required but for deepspeed)"},
      {"config", "FILE", "deepspeed: the DeepSpeed JSON config"},
      {"args", "FILE", "deepspeed: Megatron-DeepSpeed's arguments (model shape, tp, pp, --ds-sequence-parallel-size)"},
      {"cluster", "C", "the cluster the job runs on (required): library name or file"},
      {"gpus", "N", "the job's GPU count (scales the cluster)"},
      {"model", "M", "the model, where the launch does not state it: library name or file"},
      {"gbs", "G", "global batch size, where the launch does not state it"},
      {"seq-len", "S", "sequence length, where the launch does not state it"},
      {"out", "FILE", "write the plan (colo.plan/1); then evaluate, compare, search --from-plan and export read it"},
      {"help", "", "show this help"}};
  auto args = Args::parse(argv, specs);
  if (!args) return reportError(args.error(), err);
  if (args->has("help")) {
    out << "usage: colo-plan import --format megatron|deepspeed|colossalai|torchtitan --launch FILE --cluster C [--gpus N]\n"
           "         [--model M] [--gbs G] [--seq-len S] [--out plan.json]\n"
           "       colo-plan import --format deepspeed --config ds.json --args megatron-args.txt --cluster C ...\n\n"
           "Reads the job you already run into a colo plan and predicts its step time and memory, so that\n"
           "`search --from-plan` can say what would be faster. Settings colo cannot represent are refused by name.\n\n"
        << describeOptions(specs);
    return 0;
  }
  const auto formatName = args->value("format");
  if (!formatName) return reportError(Error::badInput("missing --format (megatron, deepspeed, colossalai or torchtitan)"), err);
  auto format = planner::parseImportFormat(*formatName);
  if (!format) return reportError(Error::badInput("--format: " + format.error().message), err);
  const auto clusterName = args->value("cluster");
  if (!clusterName) return reportError(Error::badInput("missing --cluster (the cluster the job runs on)"), err);
  auto clusterFile = resolveLibraryFile(LibraryKind::kClusters, *clusterName);
  if (!clusterFile) return reportError(clusterFile.error(), err);
  auto cluster = loadCluster(*clusterFile);
  if (!cluster) return reportError(cluster.error(), err);
  if (args->has("gpus")) {
    auto gpus = args->positiveInteger("gpus", 0);
    if (!gpus) return reportError(gpus.error(), err);
    auto scaled = scaleCluster(*cluster, *gpus);
    if (!scaled) return reportError(scaled.error(), err);
    cluster = std::move(*scaled);
  }
  planner::ImportContext context;
  context.cluster = *cluster;
  if (const auto m = args->value("model")) {
    auto file = resolveLibraryFile(LibraryKind::kModels, *m);
    if (!file) return reportError(file.error(), err);
    auto model = loadModel(*file);
    if (!model) return reportError(model.error(), err);
    context.model = std::move(*model);
  }
  auto gbs = args->positiveInteger("gbs", 0);
  if (!gbs) return reportError(gbs.error(), err);
  auto seq = args->positiveInteger("seq-len", 0);
  if (!seq) return reportError(seq.error(), err);
  context.globalBatchSize = *gbs;
  context.seqLen = *seq;

  Result<Plan> plan = fail(Error::internal("no import"));
  std::string source;
  if (*format == planner::ImportFormat::kDeepSpeed) {
    const auto configFile = args->value("config");
    const auto argsFile = args->value("args");
    if (!configFile || !argsFile) return reportError(Error::badInput("deepspeed: give --config ds.json and --args (Megatron-DeepSpeed's arguments)"), err);
    auto config = readJsonFile(*configFile);
    if (!config) return reportError(config.error(), err);
    auto text = readText(*argsFile);
    if (!text) return reportError(text.error(), err);
    plan = planner::importDeepSpeed(*config, *text, context);
    source = *configFile;
  } else {
    const auto launch = args->value("launch");
    if (!launch) return reportError(Error::badInput("missing --launch FILE (the arguments, script or TOML to import)"), err);
    auto text = readText(*launch);
    if (!text) return reportError(text.error(), err);
    plan = *format == planner::ImportFormat::kMegatron     ? planner::importMegatron(*text, context)
           : *format == planner::ImportFormat::kColossalAi ? planner::importColossalAi(*text, context)
                                                            : planner::importTorchtitan(*text, context);
    source = *launch;
  }
  if (!plan) {
    Error e = plan.error();
    if (e.file.empty()) e.file = source;
    return reportError(e, err);
  }
  plan->provenance.command = "colo-plan import --format " + *formatName + " " + source;
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
