// colo-profile: measure kernels into the SQLite cost database, merge databases, and check the cost
// model's prediction against a measured model step. Exit codes: 0 ok, 2 bad input, 1 internal error.
#include <chrono>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "args.h"
#include "calibrate.h"
#include "colo/core/library.h"
#include "colo/core/units.h"
#include "colo/core/version.h"
#include "colo/costmodel/calibration.h"
#include "colo/costmodel/evaluator.h"
#include "colo/profiler/collectives.h"
#include "colo/profiler/profiler.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace {

using namespace colo;

CancellationToken gCancel;
extern "C" void onSignal(int) { gCancel.cancel(); }

int report(const Error& e) {
  std::cerr << "colo-profile: error: " << e.toString() << "\n";
  return exitCodeFor(e.code);
}

// Opens DB to add to, saying on stderr when an older file's schema was migrated (in one transaction).
Result<costmodel::CostDatabase> openForWrite(const std::string& path) {
  auto db = costmodel::CostDatabase::openForWrite(path);
  if (db && db->migratedFrom() > 0) {
    std::cerr << "colo-profile: " << path << ": schema version " << db->migratedFrom() << " migrated to " << db->schemaVersion()
              << " (older colo versions cannot read it now)\n";
  }
  return db;
}

// A progress bar with the rate and an estimate of the time left.
class Bar : public ProgressSink {
 public:
  void progress(double fraction, std::string_view what) override {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - m_start).count();
    const int width = 30;
    const int filled = static_cast<int>(fraction * width);
    std::ostringstream line;
    line << "\r[" << std::string(static_cast<std::size_t>(filled), '#') << std::string(static_cast<std::size_t>(width - filled), '.')
         << "] " << static_cast<int>(fraction * 100) << "% " << formatFixed(elapsed, 0) << " s";
    if (fraction > 0.02 && fraction < 1) line << ", ETA " << formatFixed(elapsed * (1 - fraction) / fraction, 0) << " s";
    line << "  " << what;
    std::string text = line.str();
    if (text.size() < 100) text.resize(100, ' ');
    std::cerr << text << (fraction >= 1 ? "\n" : "") << std::flush;
  }

 private:
  std::chrono::steady_clock::time_point m_start = std::chrono::steady_clock::now();
};

Result<std::vector<std::int64_t>> intList(const app::Args& args, const std::string& name, std::vector<std::int64_t> fallback) {
  if (!args.has(name)) return fallback;
  return args.positiveIntegers(name, "values");
}

Result<Model> modelArg(const app::Args& args) {
  const auto name = args.value("model");
  if (!name) return fail(Error::badInput("missing --model"));
  auto file = resolveLibraryFile(LibraryKind::kModels, *name);
  if (!file) return fail(file.error());
  return loadModel(*file);
}

int profile(const std::vector<std::string>& argv) {
  const std::vector<app::OptionSpec> specs{
      {"model", "M", "model whose plans' kernels to measure (library name or file)"},
      {"db", "DB", "SQLite cost database to write (created when missing)"},
      {"tp", "T1,T2", "tensor-parallel degrees whose shard shapes to measure (default 1)"},
      {"mbs", "B1,B2", "micro-batch sizes (default 1)"},
      {"seq-len", "S", "tokens per sample (default: the model's)"},
      {"dtype", "D", "fp32 (default on cpu), bf16, fp16"},
      {"device", "D", "cpu (default) or cuda"},
      {"resume", "", "skip shapes already measured in DB"},
      {"reps", "N", "timed repetitions per kernel (default 7)"},
      {"threads", "N", "LibTorch threads while measuring (default: all); give a rank's share, e.g. 1 for colo-run --threads 1, and keep such measurements in their own database"},
      {"json", "", "print one JSON object"},
      {"quiet", "", "no progress bar"},
      {"help", "", "show this help"}};
  auto args = app::Args::parse(argv, specs);
  if (!args) return report(args.error());
  if (args->has("help")) {
    std::cout << "usage: colo-profile --model M --db DB [--tp 1,2,4,8] [--mbs 1,2] [--dtype fp32|bf16] [--device cpu|cuda]\n"
                 "         [--resume] [--json]\n"
                 "       colo-profile merge --db DB OTHER.sqlite...\n"
                 "       colo-profile check --model M --db DB [--cluster C] [--batch B] [--seq-len S]\n"
                 "       colo-profile collectives --db DB [--world N] [--sizes B1,B2,...]\n"
                 "       colo-profile calibrate --runs PATH [--gpu NAME] [--out FILE]\n"
                 "       (each subcommand takes --help)\n\n"
                 "Measures the GEMMs the model's plans run (forward, input and weight gradients) through LibTorch into\n"
                 "the cost database. Each batch of measurements is one transaction: Ctrl-C keeps what was measured,\n"
                 "--resume continues.\n\n"
              << app::describeOptions(specs);
    return 0;
  }
  auto model = modelArg(*args);
  if (!model) return report(model.error());
  const auto dbPath = args->value("db");
  if (!dbPath) return report(Error::badInput("missing --db"));
  profiler::ProfileOptions o;
  auto tp = intList(*args, "tp", {1});
  auto mbs = intList(*args, "mbs", {1});
  if (!tp) return report(tp.error());
  if (!mbs) return report(mbs.error());
  o.tensorParallel = *tp;
  o.microBatches = *mbs;
  auto seq = args->positiveInteger("seq-len", 0);
  auto reps = args->positiveInteger("reps", 7);
  if (!seq) return report(seq.error());
  if (!reps) return report(reps.error());
  o.seqLen = *seq;
  o.repetitions = static_cast<int>(*reps);
  if (args->has("threads")) {
    auto threads = args->positiveInteger("threads", 1);
    if (!threads) return report(threads.error());
    o.threads = static_cast<int>(*threads);
  }
  o.device = args->value("device", "cpu");
  auto dtype = parseDType(args->value("dtype", "fp32"));
  if (!dtype) return report(Error::badInput("--dtype: " + dtype.error().message));
  o.dtype = *dtype;
  o.resume = args->has("resume");
  // The device is checked before the database is opened, which creates it when missing: a run that cannot
  // start leaves no empty file behind.
  if (auto device = profiler::deviceName(o.device); !device) return report(device.error());
  auto db = openForWrite(*dbPath);
  if (!db) return report(db.error());
  std::signal(SIGINT, onSignal);
  std::signal(SIGTERM, onSignal);
  Bar bar;
  auto r = profiler::profileModel(*model, *db, o, args->has("quiet") || args->has("json") ? nullptr : &bar, &gCancel);
  if (!r) return report(r.error());
  if (args->has("json")) {
    std::cout << Json{{"device", r->deviceName}, {"shapes", r->shapes}, {"measured", r->measured}, {"skipped", r->skipped},
                      {"kernels", r->kernels}, {"kernels_skipped", r->kernelsSkipped}, {"copies", r->copies}, {"seconds", r->seconds}, {"cancelled", r->cancelled}, {"db", *dbPath}}.dump(2)
              << "\n";
  } else {
    std::cout << r->deviceName << ": " << r->shapes << " GEMM shapes, " << r->measured << " measured, " << r->skipped
              << " already in " << *dbPath << "; " << r->kernels << " other kernels measured"
              << (r->kernelsSkipped > 0 ? ", " + std::to_string(r->kernelsSkipped) + " already in" : std::string()) << "; "
              << (o.device.rfind("cuda", 0) == 0 ? std::to_string(r->copies) + " host-device copies"
                                                  : std::string("no host-device copies on a CPU"))
              << "; " << formatFixed(r->seconds, 1) << " s"
              << (r->cancelled ? " (interrupted: run again with --resume)" : "") << "\n";
  }
  return r->cancelled ? 130 : 0;
}

int merge(const std::vector<std::string>& argv) {
  const std::vector<app::OptionSpec> specs{{"db", "DB", "database to merge into (created when missing)"},
                                            {"help", "", "show this help"}};
  auto args = app::Args::parse(argv, specs);
  if (!args) return report(args.error());
  if (args->has("help")) {
    std::cout << "usage: colo-profile merge --db DB OTHER.sqlite...\n\n"
                 "Adds the measurements of each OTHER cost database (GEMM shapes, kernels, collectives and host-device\n"
                 "copies, with their device fingerprints) to DB; rows DB already holds are kept. Every OTHER is opened\n"
                 "and checked before DB is touched, so a missing, corrupt or foreign file (or DB itself) writes nothing;\n"
                 "each file is then added in one transaction.\n\n"
              << app::describeOptions(specs);
    return 0;
  }
  const auto dbPath = args->value("db");
  if (!dbPath || args->positional().empty()) return report(Error::badInput("usage: colo-profile merge --db DB OTHER..."));
  // Every file is checked before DB is opened (which creates it when missing): a bad one writes nothing.
  std::error_code ec;
  for (const auto& other : args->positional()) {
    if (std::filesystem::exists(*dbPath, ec) && std::filesystem::equivalent(other, *dbPath, ec)) {
      return report(Error::badInput("is the database merged into (--db): a database cannot be merged into itself", other));
    }
    if (auto opened = costmodel::CostDatabase::open(other); !opened) return report(opened.error());
  }
  auto db = openForWrite(*dbPath);
  if (!db) return report(db.error());
  for (const auto& other : args->positional()) {
    auto added = db->merge(other);
    if (!added) return report(added.error());
    std::cout << other << ": " << *added << " rows added\n";
  }
  return 0;
}

int check(const std::vector<std::string>& argv) {
  const std::vector<app::OptionSpec> specs{
      {"model", "M", "dense decoder model (library name or file)"},
      {"cluster", "C", "cluster describing this device (default localhost-cpu)"},
      {"db", "DB", "cost database measured on this device"},
      {"batch", "B", "samples per step (default 4)"},
      {"seq-len", "S", "tokens per sample (default: the model's)"},
      {"dtype", "D", "fp32 (default), bf16"},
      {"device", "D", "cpu (default) or cuda"},
      {"reps", "N", "timed steps (default 5)"},
      {"json", "", "print one JSON object"},
      {"help", "", "show this help"}};
  auto args = app::Args::parse(argv, specs);
  if (!args) return report(args.error());
  if (args->has("help")) {
    std::cout << "usage: colo-profile check --model M --db DB [--cluster C] [--batch B] [--seq-len S]\n\n"
                 "Times the model's forward + backward through LibTorch and compares it with the cost model's\n"
                 "prediction with and without the cost database.\n\n"
              << app::describeOptions(specs);
    return 0;
  }
  auto model = modelArg(*args);
  if (!model) return report(model.error());
  if (!model->spec) return report(Error::badInput("--model: check needs an architecture spec, not a raw op graph"));
  auto clusterFile = resolveLibraryFile(LibraryKind::kClusters, args->value("cluster", "localhost-cpu"));
  if (!clusterFile) return report(clusterFile.error());
  auto cluster = loadCluster(*clusterFile);
  if (!cluster) return report(cluster.error());
  const auto dbPath = args->value("db");
  if (!dbPath) return report(Error::badInput("missing --db"));
  auto db = costmodel::CostDatabase::open(*dbPath);
  if (!db) return report(db.error());
  auto batch = args->positiveInteger("batch", 4);
  auto seq = args->positiveInteger("seq-len", model->defaultSeqLen());
  auto reps = args->positiveInteger("reps", 5);
  for (const auto* r : {&batch, &seq, &reps}) {
    if (!*r) return report(r->error());
  }
  auto dtype = parseDType(args->value("dtype", "fp32"));
  if (!dtype) return report(Error::badInput("--dtype: " + dtype.error().message));
  const std::string device = args->value("device", "cpu");

  if (!args->has("json")) {
    std::cerr << "colo-profile: timing " << model->name() << " forward + backward on " << device << ": 2 warm-up and " << *reps
              << " timed steps of " << *batch << " x " << *seq << " tokens\n";
  }
  auto measured = profiler::timeModelStep(*model->spec, *seq, *batch, *dtype, device, 2, static_cast<int>(*reps));
  if (!measured) return report(measured.error());
  Plan plan;
  plan.model = *model;
  plan.cluster = *cluster;
  plan.microBatchSize = *batch;
  plan.globalBatchSize = *batch;
  plan.seqLen = *seq;
  plan.precision = *dtype;
  plan.execution.flashAttention = false;  // the LibTorch step runs unfused attention
  plan.stages = uniformStages(model->numLayers(), 1, RecomputePolicy::kNone);
  auto without = costmodel::evaluatePlan(plan);
  auto with = costmodel::evaluatePlan(plan, &*db);
  if (!without) return report(without.error());
  if (!with) return report(with.error());
  // Forward + backward of the one micro-batch (the LibTorch step has no optimizer).
  const double predictedWithout = without->stages[0].forwardSeconds + without->stages[0].backwardSeconds;
  const double predictedWith = with->stages[0].forwardSeconds + with->stages[0].backwardSeconds;
  const double m = measured->median;
  if (args->has("json")) {
    std::cout << Json{{"model", model->name()},
                      {"measured_step_s", m},
                      {"measured_spread_s", measured->spread},
                      {"predicted_with_costdb_s", predictedWith},
                      {"predicted_roofline_s", predictedWithout},
                      {"error_with_costdb", (predictedWith - m) / m},
                      {"error_roofline", (predictedWithout - m) / m},
                      {"gemm_time_sources", {{"exact", with->gemmExact}, {"interpolated", with->gemmInterpolated},
                                             {"roofline", with->gemmRoofline}}}}
                     .dump(2)
              << "\n";
  } else {
    std::cout << model->name() << " forward + backward, batch " << *batch << " x " << *seq << " tokens, " << device << ":\n"
              << "  measured (LibTorch, median of " << measured->repetitions << ")  " << formatFixed(m * 1e3, 2) << " ms (+-"
              << formatFixed(measured->spread * 1e3, 2) << ")\n"
              << "  predicted with the cost database    " << formatFixed(predictedWith * 1e3, 2) << " ms  ("
              << formatFixed(100 * (predictedWith - m) / m, 1) << "%; GEMMs: " << with->gemmExact << " exact, "
              << with->gemmInterpolated << " interpolated, " << with->gemmRoofline << " roofline)\n"
              << "  predicted by the roofline alone     " << formatFixed(predictedWithout * 1e3, 2) << " ms  ("
              << formatFixed(100 * (predictedWithout - m) / m, 1) << "%)\n";
  }
  return 0;
}

const std::vector<app::OptionSpec>& collectiveSpecs() {
  static const std::vector<app::OptionSpec> specs{
      {"db", "DB", "cost database to write (created when missing)"},
      {"world", "N", "processes (ranks) on this machine (default 2; nccl: 1 or more, one GPU each)"},
      {"backend", "B", "gloo (CPU tensors, default) or nccl (CUDA tensors; a CUDA LibTorch build)"},
      {"port", "P", "TCPStore port on 127.0.0.1 (default 29631)"},
      {"sizes", "B1,B2", "message sizes in bytes per rank (default 1 KiB to 64 MiB)"},
      {"reps", "N", "timed repetitions per size (default 5)"},
      {"resume", "", "measure only the sizes the database lacks (after an interrupted run)"},
      {"rank", "R", "(internal) run as this rank"},
      {"json", "", "print one JSON object"},
      {"quiet", "", "no progress bar"},
      {"help", "", "show this help"}};
  return specs;
}

Result<profiler::CollectiveOptions> collectiveOptions(const app::Args& args) {
  profiler::CollectiveOptions o;
  auto world = args.positiveInteger("world", 2);
  auto port = args.positiveInteger("port", 29631);
  auto reps = args.positiveInteger("reps", 5);
  for (const auto* r : {&world, &port, &reps}) {
    if (!*r) return fail(r->error());
  }
  o.backend = args.value("backend", "gloo");
  if (o.backend != "gloo" && o.backend != "nccl") return fail(Error::badInput("--backend: expected gloo or nccl, got \"" + o.backend + "\""));
  if (*world < (o.backend == "nccl" ? 1 : 2)) {
    return fail(Error::badInput("--world: " + o.backend + " collectives need at least " + (o.backend == "nccl" ? "1 rank" : "2 ranks")));
  }
  if (*port > 65535) return fail(Error::badInput("--port: must be below 65536"));
  auto sizes = intList(args, "sizes", o.sizes);
  if (!sizes) return fail(sizes.error());
  o.world = static_cast<int>(*world);
  o.port = static_cast<int>(*port);
  o.repetitions = static_cast<int>(*reps);
  o.sizes = *sizes;
  return o;
}

// Rank 0 here and ranks 1..N-1 as this program again, all measuring `o`. Ctrl-C: the ranks are
// spawned while SIGINT is ignored (which they keep across exec), so the terminal's Ctrl-C reaches rank 0
// alone, whose handler tells every rank to stop after the size in flight.
Result<std::vector<costmodel::CollectiveMeasurement>> measureCollectives(const profiler::CollectiveOptions& o, ProgressSink* progress) {
  std::signal(SIGINT, SIG_IGN);
  std::vector<pid_t> children;
  std::string sizes;
  for (const auto s : o.sizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(s);
  for (int rank = 1; rank < o.world; ++rank) {
    std::vector<std::string> childArgs{"/proc/self/exe", "collectives", "--rank", std::to_string(rank), "--world",
                                       std::to_string(o.world), "--backend", o.backend, "--port", std::to_string(o.port), "--sizes", sizes,
                                       "--reps", std::to_string(o.repetitions)};
    std::vector<char*> cargs;
    for (auto& a : childArgs) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, cargs.data(), environ) != 0) {
      for (const auto c : children) kill(c, SIGTERM);
      return fail(Error::internal("cannot start rank " + std::to_string(rank)));
    }
    children.push_back(pid);
  }
  std::signal(SIGINT, onSignal);
  std::signal(SIGTERM, onSignal);
  auto measured = profiler::runCollectiveWorker(o, 0, progress, &gCancel);
  bool childFailed = false;
  for (const auto pid : children) {
    if (!measured) kill(pid, SIGTERM);  // no rank outlives a failed group
    int status = 0;
    waitpid(pid, &status, 0);
    childFailed = childFailed || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  if (!measured) return fail(measured.error());
  if (childFailed) return fail(Error::internal("a collective rank failed; see its message above"));
  return measured;
}

int collectives(const std::vector<std::string>& argv) {
  auto args = app::Args::parse(argv, collectiveSpecs());
  if (!args) return report(args.error());
  if (args->has("help")) {
    std::cout << "usage: colo-profile collectives --db DB [--world N] [--backend gloo|nccl] [--sizes B1,B2,...] [--port P] [--json]\n\n"
                 "Measures all-reduce, all-gather and broadcast through c10d/Gloo across N local processes and fits\n"
                 "latency and bandwidth. Ctrl-C stops every rank after the size in flight and keeps the sizes completed;\n"
                 "--resume then measures the rest.\n\n"
              << app::describeOptions(collectiveSpecs());
    return 0;
  }
  auto o = collectiveOptions(*args);
  if (!o) return report(o.error());
  if (args->has("rank")) {  // a spawned rank: measure and exit
    // Ctrl-C reaches every process of the terminal's group; rank 0 alone decides when all stop (SIGINT is
    // ignored from the spawn on: measureCollectives).
    std::signal(SIGINT, SIG_IGN);
    auto rank = args->positiveInteger("rank", 1);
    if (!rank) return report(rank.error());
    auto r = profiler::runCollectiveWorker(*o, static_cast<int>(*rank));
    if (!r) return report(r.error());
    return 0;
  }
  const auto dbPath = args->value("db");
  if (!dbPath) return report(Error::badInput("missing --db"));
  auto name = profiler::deviceName(o->backend == "nccl" ? "cuda" : "cpu");
  if (!name) return report(name.error());
  auto db = openForWrite(*dbPath);
  if (!db) return report(db.error());
  std::size_t already = 0;
  if (args->has("resume")) {
    const auto missing = profiler::collectiveSizesMissing(*o, db->collectivesFor(*name));
    already = o->sizes.size() - missing.size();
    o->sizes = missing;
  }
  Bar bar;
  auto measured = o->sizes.empty() ? Result<std::vector<costmodel::CollectiveMeasurement>>{}
                                   : measureCollectives(*o, args->has("quiet") || args->has("json") ? nullptr : &bar);
  if (!measured) return report(measured.error());
  if (!measured->empty()) {
    if (auto w = db->addCollectives(*name, *measured, profiler::deviceFingerprint(o->backend == "nccl" ? "cuda" : "cpu")); !w) {
      return report(w.error());
    }
  }
  // Cut short only when a size was left out (Ctrl-C during the last size still measured them all).
  const bool interrupted = measured->size() < 3 * o->sizes.size();
  // The same ring model over the same rows the cost model uses (the device's, this run's and earlier
  // ones'); `colo-plan evaluate --costdb` applies these fits.
  const auto fits = costmodel::fitLinkLevels(db->collectivesFor(*name));
  if (args->has("json")) {
    Json j = Json::array();
    for (const auto& f : fits) {
      j.push_back({{"level", f.level}, {"points", f.points}, {"latency_us", f.latencySeconds * 1e6},
                   {"bandwidth_GBps", f.bytesPerSecond / 1e9}, {"rms_relative_error", f.rmsRelativeError}});
    }
    std::cout << Json{{"device", *name}, {"measurements", measured->size()}, {"sizes_already_in", already}, {"cancelled", interrupted}, {"fits", j}}
                     .dump(2)
              << "\n";
  } else {
    std::cout << *name << ": " << measured->size() << " collective measurements (" << o->backend << ", " << o->world << " ranks) in "
              << *dbPath << (already > 0 ? "; " + std::to_string(already) + " sizes already in" : std::string())
              << (interrupted ? " (interrupted: run again with --resume)" : "") << "\n";
    for (const auto& f : fits) {
      std::cout << "  link level " << f.level << " (ring model over " << f.points << " measurements): latency "
                << formatFixed(f.latencySeconds * 1e6, 1) << " us per step, bandwidth " << formatFixed(f.bytesPerSecond / 1e9, 2)
                << " GB/s, rms error " << formatFixed(100 * f.rmsRelativeError, 1) << "%\n";
    }
  }
  return interrupted ? 130 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::vector<std::string> args(argv + 1, argv + argc);
    if (!args.empty() && args[0] == "--version") {
      std::cout << "colo-profile " << colo::kVersion << "\n";
      return 0;
    }
    if (!args.empty() && args[0] == "merge") return merge({args.begin() + 1, args.end()});
    if (!args.empty() && args[0] == "check") return check({args.begin() + 1, args.end()});
    if (!args.empty() && args[0] == "calibrate") return colo::app::calibrate({args.begin() + 1, args.end()});
    if (!args.empty() && args[0] == "collectives") return collectives({args.begin() + 1, args.end()});
    if (!args.empty() && !args[0].starts_with("-")) {
      return report(Error::badInput("unknown command \"" + args[0] + "\" (merge, check, collectives, calibrate; or --model M --db DB to "
                                    "profile; colo-profile --help)"));
    }
    return profile(args);
  } catch (const std::exception& e) {
    std::cerr << "colo-profile: internal error: " << e.what() << "\n";
    return 1;
  }
}
