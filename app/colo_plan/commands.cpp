#include "commands.h"

#include <cstdlib>
#include <iostream>

#include "args.h"
#include "colo/costmodel/cost_db.h"
#include "colo/core/cluster.h"
#include "colo/core/library.h"
#include "colo/core/model.h"
#include "colo/core/plan.h"
#include "colo/planner/search.h"
#include "inspect_report.h"

namespace colo::app {
namespace {

const std::vector<OptionSpec>& inspectOptions() {
  static const std::vector<OptionSpec> specs{
      {"model", "M", "model: a library name (colo-plan list models) or a colo.model/1, HF config.json or colo.opgraph/1 file"},
      {"cluster", "C", "cluster: a library name (colo-plan list clusters) or a colo.cluster/1 file (optional)"},
      {"gpus", "N", "scale the cluster to N GPUs (whole nodes, or a divisor of one node)"},
      {"seq-len", "S", "tokens per sample (default: the model's seq_len or context size)"},
      {"batch", "B", "samples the op table is computed for (default 1)"},
      {"precision", "P", "bf16, fp16, fp8, fp4 (Blackwell), fp32 or tf32: activation and model-state bytes (default: bf16, or fp16 on GPUs without bf16)"},
      {"json", "", "print one JSON object instead of text"},
      {"help", "", "show this help"},
  };
  return specs;
}

}  // namespace

Result<DType> precisionOption(const Args& args, const ClusterSpec* cluster) {
  const auto given = args.value("precision");
  if (!given) return cluster ? planner::defaultPrecision(cluster->gpu) : DType::kBf16;
  auto precision = parseDType(*given);
  if (!precision) return fail(Error::badInput("--precision: " + precision.error().message));
  return *precision;
}

std::string clusterLabel(const ClusterSpec& cluster) {
  if (cluster.name.find("(scaled to ") != std::string::npos) return cluster.name;
  const std::int64_t gpus = cluster.totalGpus();
  return cluster.name + " (" + std::to_string(gpus) + (gpus == 1 ? " GPU)" : " GPUs)");
}

int reportError(const Error& error, std::ostream& err) {
  err << "colo-plan: error: " << error.toString() << "\n";
  return exitCodeFor(error.code);
}

int runInspect(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  auto args = Args::parse(argv, inspectOptions());
  if (!args) return reportError(args.error(), err);
  if (args->has("help")) {
    out << "usage: colo-plan inspect --model M [--cluster C] [--gpus N] [--seq-len S] [--batch B] [--precision P] [--json]\n\n"
           "Describes a model (parameters, FLOPs per token, model-state and activation memory, per-layer ops)\n"
           "and, with --cluster, the cluster it would train on.\n\n"
        << describeOptions(inspectOptions());
    return 0;
  }
  if (!args->positional().empty()) {
    return reportError(Error::badInput("unexpected argument \"" + args->positional().front() + "\""), err);
  }
  const auto modelName = args->value("model");
  if (!modelName) return reportError(Error::badInput("missing --model (a library name or a file)"), err);
  auto modelFile = resolveLibraryFile(LibraryKind::kModels, *modelName);
  if (!modelFile) return reportError(modelFile.error(), err);
  auto model = loadModel(*modelFile);
  if (!model) return reportError(model.error(), err);

  std::optional<ClusterSpec> cluster;
  if (const auto clusterName = args->value("cluster")) {
    auto clusterFile = resolveLibraryFile(LibraryKind::kClusters, *clusterName);
    if (!clusterFile) return reportError(clusterFile.error(), err);
    auto loaded = loadCluster(*clusterFile);
    if (!loaded) return reportError(loaded.error(), err);
    cluster = std::move(*loaded);
  }
  if (args->has("gpus")) {
    if (!cluster) return reportError(Error::badInput("--gpus needs --cluster"), err);
    auto gpus = args->positiveInteger("gpus", 0);
    if (!gpus) return reportError(gpus.error(), err);
    auto scaled = scaleCluster(*cluster, *gpus);
    if (!scaled) return reportError(scaled.error(), err);
    cluster = std::move(*scaled);
  }
  InspectOptions options;
  auto seqLen = args->positiveInteger("seq-len", 0);
  if (!seqLen) return reportError(seqLen.error(), err);
  options.seqLen = *seqLen;
  auto batch = args->positiveInteger("batch", 1);
  if (!batch) return reportError(batch.error(), err);
  options.batch = *batch;
  auto precision = precisionOption(*args, cluster ? &*cluster : nullptr);
  if (!precision) {
    Error e = precision.error();
    return reportError(e, err);
  }
  options.precision = *precision;

  auto report = buildInspectReport(*model, cluster, options);
  if (!report) return reportError(report.error(), err);
  if (args->has("json")) {
    out << report->dump(2) << "\n";
  } else {
    out << renderInspectReport(*report);
  }
  return 0;
}

int runValidate(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  auto args = Args::parse(argv, {{"help", "", "show this help"}});
  if (!args) return reportError(args.error(), err);
  if (args->has("help") || args->positional().empty()) {
    (args->has("help") ? out : err)
        << "usage: colo-plan validate FILE...\n\n"
           "Checks model, op-graph, HF config, cluster and plan files; prints one line per file and exits 2\n"
           "at the first bad one.\n";
    return args->has("help") ? 0 : 2;
  }
  for (const auto& file : args->positional()) {
    auto document = readJsonFile(file);
    if (!document) return reportError(document.error(), err);
    std::string what;
    if (document->is_object() && !document->contains("format") && document->contains("model_type")) {
      auto model = modelFromJson(*document, file);
      if (!model) return reportError(model.error(), err);
      what = "Hugging Face config of " + model->name();
    } else {
      auto tag = readFormatTag(*document, file);
      if (!tag) return reportError(tag.error(), err);
      if (tag->kind == "model" || tag->kind == "opgraph") {
        auto model = modelFromJson(*document, file);
        if (!model) return reportError(model.error(), err);
        what = "colo." + tag->kind + "/1 " + model->name();
      } else if (tag->kind == "cluster") {
        if (auto format = requireFormat(*document, file, "cluster", 1); !format) return reportError(format.error(), err);
        auto cluster = clusterFromJson(*document, file);
        if (!cluster) return reportError(cluster.error(), err);
        what = "colo.cluster/1 " + clusterLabel(*cluster);
      } else if (tag->kind == "plan") {
        auto plan = loadPlan(file);
        if (!plan) return reportError(plan.error(), err);
        what = "colo.plan/1 for " + plan->model.name() + " on " + std::to_string(plan->cluster.totalGpus()) + " GPUs";
      } else {
        return reportError(Error::badInput("unknown document kind \"colo." + tag->kind +
                                               "\" (expected model, opgraph, cluster or plan)",
                                           file, "/format"),
                           err);
      }
    }
    out << file << ": ok (" << what << ")\n";
  }
  return 0;
}

int runList(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  auto args = Args::parse(argv, {{"help", "", "show this help"}});
  if (!args) return reportError(args.error(), err);
  const std::string what = args->positional().empty() ? "all" : args->positional().front();
  if (args->has("help") || (what != "models" && what != "clusters" && what != "costdbs" && what != "all")) {
    (args->has("help") ? out : err) << "usage: colo-plan list [models|clusters|costdbs]\n";
    return args->has("help") ? 0 : 2;
  }
  for (const auto kind : {LibraryKind::kModels, LibraryKind::kClusters}) {
    const bool models = kind == LibraryKind::kModels;
    if (what != "all" && what != (models ? "models" : "clusters")) continue;
    out << (models ? "models" : "clusters") << " (" << dataDirectory() << "/" << (models ? "models" : "clusters") << "):\n";
    for (const auto& name : libraryEntries(kind)) {
      const std::string file = dataDirectory() + "/" + (models ? "models/" : "clusters/") + name + ".json";
      if (models) {
        auto model = loadModel(file);
        if (!model) {
          out << "  " << name << "  (invalid: " << model.error().toString() << ")\n";
          continue;
        }
        const auto count = model->spec ? countParameters(*model->spec).total : model->graph->totals().params;
        out << "  " << name << std::string(name.size() < 22 ? 22 - name.size() : 1, ' ') << count / 1'000'000 << "M params\n";
      } else {
        auto cluster = loadCluster(file);
        if (!cluster) {
          out << "  " << name << "  (invalid: " << cluster.error().toString() << ")\n";
          continue;
        }
        out << "  " << name << std::string(name.size() < 22 ? 22 - name.size() : 1, ' ') << cluster->totalGpus() << " x "
            << cluster->gpu.name << "\n";
      }
    }
  }
  if (what == "all" || what == "costdbs") {
    // Measured cost databases (--costdb NAME): their devices.
    out << "costdbs (" << dataDirectory() << "/costdb):\n";
    for (const auto& name : libraryEntries(LibraryKind::kCostDbs)) {
      auto db = costmodel::CostDatabase::open(dataDirectory() + "/costdb/" + name + ".sqlite");
      std::string devices;
      if (db) {
        for (const auto& d : db->devices()) devices += (devices.empty() ? "" : ", ") + d;
      }
      out << "  " << name << std::string(name.size() < 22 ? 22 - name.size() : 1, ' ')
          << (db ? devices : "(invalid: " + db.error().toString() + ")") << "\n";
    }
  }
  return 0;
}

std::vector<OptionSpec> budgetOptions() {
  return {{"train-tokens", "N", "tokens to train on (300B, 1.5T, 3e11): adds days, GPU-hours (and dollars) per plan"},
          {"price-per-gpu-hour", "USD", "price of one GPU-hour, for dollars per plan (needs --train-tokens)"},
          {"deadline-days", "D", "the run must finish within D days (needs --train-tokens)"}};
}

Result<planner::TrainingBudget> budgetOption(const Args& args) {
  planner::TrainingBudget b;
  if (const auto tokens = args.value("train-tokens")) {
    auto parsed = planner::parseTokenCount(*tokens);
    if (!parsed) return fail(Error::badInput("--train-tokens: " + parsed.error().message));
    b.trainTokens = *parsed;
  }
  auto positive = [&](const char* name, double* into) -> Result<void> {
    const auto text = args.value(name);
    if (!text) return {};
    if (!b.enabled()) return fail(Error::badInput(std::string("--") + name + " needs --train-tokens (how many tokens the run trains on)"));
    auto v = args.number(name, 0, {0, 1e9, true});
    if (!v) return fail(v.error());
    *into = *v;
    return {};
  };
  if (auto r = positive("price-per-gpu-hour", &b.pricePerGpuHour); !r) return fail(r.error());
  if (auto r = positive("deadline-days", &b.deadlineDays); !r) return fail(r.error());
  return b;
}

}  // namespace colo::app
