// colo-run: trains a saved plan. Started by hand it spawns the plan's ranks on this machine; started by
// torchrun, SLURM or mpirun (RANK and WORLD_SIZE set) it is one rank of that job.
#include <arpa/inet.h>
#include <ftw.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <thread>
#include <tuple>

#include "args.h"
#include "fatal.h"
#include "colo/core/library.h"
#include "colo/core/runnable.h"
#include "colo/core/units.h"
#include "colo/core/version.h"
#include "colo/executor/data.h"
#include "colo/costmodel/cost_db.h"
#include "colo/executor/executor.h"
#include "colo/executor/runs_db.h"
#include "colo/planner/baseline.h"
#include "colo/planner/search.h"
#include "text_table.h"

namespace colo {
namespace {

int report(const Error& e) {
  std::cerr << "colo-run: error: " << e.toString() << "\n";
  return exitCodeFor(e.code);
}

std::vector<app::OptionSpec> runOptions() {
  return {{"data", "FILE", "token file: .u16/.u32 flat tokens or a Megatron .bin (+ .idx); colo-run prepare makes one"},
          {"steps", "N", "optimizer steps to run (default 20)"},
          {"nproc-per-node", "K", "ranks to start on this machine (default: all the plan needs)"},
          {"backend", "B", "gloo (CPU, default) or nccl (GPU)"},
          {"checkpoint-dir", "DIR", "write sharded checkpoints here (after the last step, or every --checkpoint-every)"},
          {"checkpoint-every", "N", "steps between checkpoints"},
          {"resume", "", "continue from the newest checkpoint in --checkpoint-dir (any plan of the same model)"},
          {"runs-db", "FILE", "record the run in this SQLite runs database"},
          {"seed", "S", "seed of initialisation and data sampling (default 1234)"},
          {"costdb", "DB", "predict with this cost database (this machine's, from colo-profile) to compare like with like"},
          {"lr", "X", "peak learning rate (default 1e-3; warm-up then cosine to a tenth)"},
          {"warmup", "N", "warm-up steps (default a tenth of --steps, at least 5)"},
          {"momentum", "X", "LARS momentum (default 0.9; the plan's optimizer field chooses LARS)"},
          {"trust-coefficient", "X", "LARS trust coefficient eta (default 0.001)"},
          {"moe-aux-loss-coeff", "X", "MoE load-balancing loss coefficient (default 0.01, Switch Transformer's)"},
          {"threads", "N", "intra-op threads per rank (default: cores / ranks)"},
          {"timeout", "S", "seconds a collective waits for a missing rank (default 120)"},
          {"compare", "PLAN", "then run this baseline plan of the same model (or \"megatron\": the Megatron-style baseline colo-plan compare uses) and print both side by side"},
          {"json", "", "print one JSON object at the end"},
          {"quiet", "", "no per-step progress"},
          {"fused-kernels", "auto|on|off", "colo's fused kernels (norms, SwiGLU, rotary, cross-entropy) in the model: auto = on CUDA devices only"},
          {"no-overlap", "", "ZeRO-2/3: no prefetch of the next unit's weights, each gradient reduce-scatter finished before the backward goes on (same losses; to measure what the overlap hides)"},
          {"trace", "FILE", "rank 0 records its last two steps as a Chrome trace (host operators, CUDA kernels, colo's phases; open in Perfetto; scripts/gpu/trace_summary.py sums it)"},
          {"help", "", "show this help"}};
}

std::atomic<int> gSignal{0};
void onSignal(int s) { gSignal = s; }

// Removes a directory and what it holds (the launcher's result files). By nftw, not
// std::filesystem::remove_all: PyTorch's libtorch.so exports its own copy of that function, the dynamic
// linker binds colo-run's call to it, and there it calls a null pointer (seen on an H200 with PyTorch
// 2.11: every launcher died of signal 11 after its ranks had finished, its result unprinted).
int removeEntry(const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }
void removeTree(const std::string& dir) { nftw(dir.c_str(), removeEntry, 16, FTW_DEPTH | FTW_PHYS); }

// Whether a TCP port on the loopback interface can be bound now.
bool portFree(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

// The job's store port: a free one below the kernel's ephemeral range. A port the kernel hands out
// itself (bind to 0) can be taken again, between this check and the store's bind, by any socket that
// asks for an ephemeral port, such as the Gloo connections of another job on this machine (seen: a
// rank failing with "Address already in use" under ctest -j2); below the range only another launcher's
// random choice can collide.
int freePort() {
  int low = 32768;
  if (std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range"); range) range >> low;
  const int from = 20000, to = std::max(from + 1000, low);
  std::random_device device;
  std::mt19937 pick(device());
  std::uniform_int_distribution<int> port(from, to - 1);
  for (int attempt = 0; attempt < 64; ++attempt) {
    const int p = port(pick);
    if (portFree(p)) return p;
  }
  return 29500;
}

Result<Plan> loadRunnablePlan(const std::string& file) { return loadPlan(file); }

// A path as given, else a file of the shipped corpus folder (data/corpus) of that name.
std::string corpusFile(const std::string& nameOrPath) {
  std::error_code ec;
  if (std::filesystem::exists(nameOrPath, ec)) return nameOrPath;
  const std::string shipped = dataDirectory() + "/corpus/" + nameOrPath;
  return std::filesystem::exists(shipped, ec) ? shipped : nameOrPath;
}

// Starts `world` ranks of this program with torchrun's environment and waits. The first rank to fail
// stops the others (SIGTERM, then SIGKILL after 5 s); Ctrl-C does the same. Returns the job's exit code.
int launch(const std::vector<std::string>& argv, int world, const std::string& resultFile) {
  const int port = freePort();
  std::vector<pid_t> children;
  for (int rank = 0; rank < world; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) {
      for (const auto c : children) kill(c, SIGKILL);
      return report(Error::internal("cannot start rank " + std::to_string(rank)));
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // no rank outlives the launcher
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      setenv("COLO_RUN_RESULT", resultFile.c_str(), 1);
      std::vector<char*> args;
      std::string self = "colo-run";
      args.push_back(self.data());
      std::vector<std::string> copy = argv;
      for (auto& a : copy) args.push_back(a.data());
      args.push_back(nullptr);
      execv("/proc/self/exe", args.data());
      _exit(127);
    }
    children.push_back(pid);
  }
  std::signal(SIGINT, onSignal);
  std::signal(SIGTERM, onSignal);
  int exitCode = 0;
  int running = world;
  std::string why;
  auto stopAll = [&] {
    for (const auto c : children) {
      if (c > 0) kill(c, SIGTERM);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (running > 0 && std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      const pid_t done = waitpid(-1, &status, WNOHANG);
      if (done > 0) {
        for (auto& c : children) {
          if (c == done) c = -1;
        }
        --running;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    for (auto& c : children) {
      if (c > 0) {
        kill(c, SIGKILL);
        waitpid(c, nullptr, 0);
        c = -1;
        --running;
      }
    }
  };
  while (running > 0) {
    if (gSignal) {
      std::cerr << "colo-run: interrupted: stopping " << running << " ranks\n";
      stopAll();
      return 130;
    }
    int status = 0;
    const pid_t done = waitpid(-1, &status, WNOHANG);
    if (done <= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    int rank = -1;
    for (std::size_t i = 0; i < children.size(); ++i) {
      if (children[i] == done) {
        rank = static_cast<int>(i);
        children[i] = -1;
      }
    }
    --running;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok) {
      exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
      why = WIFSIGNALED(status) ? std::string("killed by signal ") + std::to_string(WTERMSIG(status))
                                : "exit status " + std::to_string(WEXITSTATUS(status));
      std::cerr << "colo-run: rank " << rank << " failed (" << why << "); stopping the other " << running << " ranks\n";
      stopAll();
      return exitCode == 0 ? 1 : exitCode;
    }
  }
  return 0;
}

Result<executor::RunResult> readResult(const std::string& file) {
  auto j = readJsonFile(file);
  if (!j) return fail(j.error());
  return executor::resultFromJson(*j);
}

int printResult(const executor::RunResult& r, bool json) {
  // Flushed at once: whatever happens after, the result is out.
  if (json) std::cout << r.toJson().dump(2) << std::endl;
  else std::cout << executor::renderResult(r) << std::flush;
  return 0;
}

// One rank (launched by us, torchrun, SLURM or mpirun).
int rankMain(const app::Args& args, executor::RunOptions options) {
  auto world = executor::WorldInfo::fromEnvironment();
  if (!world) return report(world.error());
  app::reportFatalSignalsAs("rank " + std::to_string(world->rank));
  auto result = executor::runRank(options, *world);
  if (!result) {
    std::cerr << "colo-run: rank " << world->rank << ": error: " << result.error().toString() << "\n";
    return exitCodeFor(result.error().code);
  }
  if (world->rank != 0) return 0;
  if (const auto db = args.value("runs-db")) {
    auto runs = executor::RunsDatabase::open(*db);
    if (!runs) return report(runs.error());
    // The plan goes with the run, so that `colo-profile calibrate --runs` can fit the cost model on it.
    if (auto added = runs->add(*result, planToJson(options.plan).dump()); !added) return report(added.error());
  }
  if (const char* file = std::getenv("COLO_RUN_RESULT"); file && *file) {
    if (auto wrote = writeJsonFileAtomic(file, result->toJson()); !wrote) return report(wrote.error());
    return 0;
  }
  return printResult(*result, args.has("json"));
}

Result<executor::RunOptions> optionsFrom(const app::Args& args, const std::string& planFile) {
  executor::RunOptions o;
  auto plan = loadRunnablePlan(planFile);
  if (!plan) return fail(plan.error());
  o.plan = std::move(*plan);
  o.planFile = planFile;
  const auto data = args.value("data");
  if (!data) return fail(Error::badInput("--data FILE is required (colo-run prepare TEXT --out FILE.u16 makes one)"));
  o.dataFile = corpusFile(*data);
  auto steps = args.positiveInteger("steps", 20);
  if (!steps) return fail(steps.error());
  o.steps = *steps;
  o.backend = args.value("backend", "gloo");
  o.checkpointDir = args.value("checkpoint-dir", "");
  auto every = args.positiveInteger("checkpoint-every", 1 << 30);
  if (!every) return fail(every.error());
  o.checkpointEvery = *every == (1 << 30) ? 0 : *every;
  o.resume = args.has("resume");
  if (const auto db = args.value("costdb")) {  // a path, or a shipped database by name
    auto file = resolveLibraryFile(LibraryKind::kCostDbs, *db);
    if (!file) return fail(Error::badInput("--costdb: " + file.error().message));
    o.costDbFile = *file;
  }
  auto seed = args.positiveInteger("seed", 1234);
  if (!seed) return fail(seed.error());
  o.seed = static_cast<std::uint64_t>(*seed);
  if (args.has("lr")) {
    auto lr = args.number("lr", 0, {0, INFINITY, true});
    if (!lr) return fail(lr.error());
    o.learningRate = *lr;
    o.minLearningRate = o.learningRate / 10;
  }
  for (const auto& [name, target, range] : {std::tuple<const char*, double*, app::NumberRange>{"momentum", &o.momentum, {0, 1, false, true}},
                                           {"trust-coefficient", &o.trustCoefficient, {0, 1e6, false, true}},
                                           {"moe-aux-loss-coeff", &o.moeAuxLossCoeff, {0, 1e6, false, true}}}) {
    auto v = args.number(name, *target, range);
    if (!v) return fail(v.error());
    *target = *v;
  }
  // Without --warmup: a tenth of the run, at least 5 steps. Two steps of warm-up let Adam's early,
  // poorly estimated second moments take full-size steps: the README's 20-step run spiked above its
  // starting loss at step 9 (grad norm 64); with 5 it decreases smoothly and ends lower.
  auto warmup = args.positiveInteger("warmup", std::max<std::int64_t>(5, o.steps / 10));
  if (!warmup) return fail(warmup.error());
  o.warmupSteps = *warmup;
  auto threads = args.positiveInteger("threads", 0 + 1);
  if (!threads) return fail(threads.error());
  o.threads = args.has("threads") ? static_cast<int>(*threads) : 0;
  auto timeout = args.positiveInteger("timeout", 120);
  if (!timeout) return fail(timeout.error());
  o.timeoutSeconds = static_cast<int>(*timeout);
  o.overlap = !args.has("no-overlap");
  const std::string fused = args.value("fused-kernels", "auto");
  if (fused != "auto" && fused != "on" && fused != "off") {
    return fail(Error::badInput("--fused-kernels: expected auto, on or off, got \"" + fused + "\""));
  }
  o.fusedKernels = fused == "on" ? executor::FusedKernels::kOn : fused == "off" ? executor::FusedKernels::kOff : executor::FusedKernels::kAuto;
  o.traceFile = args.value("trace", "");
  o.progress = !args.has("quiet");  // on stderr, so --json output stays one object on stdout
  return o;
}

// Checked before any rank starts, once here rather than by every rank (one line, not one per rank):
// the plan against this machine, a checkpoint to resume, the cost database and the data.
Result<int> checkBeforeLaunch(const app::Args& args, const executor::RunOptions& options, const std::string& planFile) {
  const auto& p = options.plan.parallel;
  const int world = static_cast<int>(p.tp * p.pp * p.dp * p.cp);
  auto nproc = args.positiveInteger("nproc-per-node", world);
  if (!nproc) return fail(nproc.error());
  if (*nproc != world) {
    return fail(Error::badInput("--nproc-per-node " + std::to_string(*nproc) + ": the plan needs " + std::to_string(world) +
                                " ranks; a job over several machines is started by torchrun or SLURM (colo-plan export "
                                "--format torchrun|slurm), each rank running colo-run"));
  }
  // A plan for several multi-GPU nodes is not started by hand by mistake: every rank would run here.
  if (auto byHand = checkStartedByHand(options.plan); !byHand && !args.has("nproc-per-node")) {
    return fail(Error::badInput(byHand.error().message + ", or pass --nproc-per-node " + std::to_string(world) +
                                    " to run every rank on this machine",
                                planFile));
  }
  if (auto ok = executor::checkExecutable(options.plan, world, options.backend); !ok) {
    return fail(Error::badInput(ok.error().message, planFile));
  }
  if (options.resume) {
    if (auto newest = executor::latestCheckpoint(options.checkpointDir); !newest) return fail(newest.error());
  }
  if (!options.costDbFile.empty()) {
    if (auto db = costmodel::CostDatabase::open(options.costDbFile); !db) return fail(db.error());
  }
  auto data = executor::TokenData::open(options.dataFile);
  if (!data) return fail(data.error());
  if (const auto vocab = options.plan.model.spec->vocabSize; data->maxToken() >= static_cast<std::uint64_t>(vocab)) {
    return fail(Error::badInput("token id " + std::to_string(data->maxToken()) + " is outside the model's vocabulary of " +
                                    std::to_string(vocab),
                                options.dataFile));
  }
  return world;
}

// --compare PLAN (or "megatron": the Megatron-style baseline of the same model, cluster, batch and
// precision, written into `resultDir`): its options, checked like the plan's. `file` becomes its path.
Result<std::optional<executor::RunOptions>> baselineOptions(const app::Args& args, const executor::RunOptions& options,
                                                            const std::string& resultDir, std::optional<std::string>& file) {
  file = args.value("compare");
  if (!file) return std::optional<executor::RunOptions>{};
  if (*file == "megatron") {
    const Plan& p0 = options.plan;
    auto made = planner::baselinePlan(planner::Baseline::kMegatron, p0.model, p0.cluster, p0.globalBatchSize, p0.seqLen,
                                      p0.precision, 0.95);
    if (!made) return fail(made.error());
    made->plan.name = "megatron-baseline";
    planner::annotate(made->plan, made->evaluation, "colo-run --compare megatron", "");
    file = resultDir + "/megatron-baseline.json";
    if (auto wrote = writeJsonFileAtomic(*file, planToJson(made->plan)); !wrote) return fail(wrote.error());
  }
  auto b = optionsFrom(args, *file);
  if (!b) return fail(b.error());
  const auto& q = b->plan.parallel;
  if (auto ok = executor::checkExecutable(b->plan, static_cast<int>(q.tp * q.pp * q.dp * q.cp), b->backend); !ok) {
    return fail(Error::badInput(ok.error().message, *file));
  }
  if (b->plan.model.name() != options.plan.model.name()) {
    return fail(Error::badInput("--compare: the baseline trains " + b->plan.model.name() + ", the plan " + options.plan.model.name(), *file));
  }
  return std::optional<executor::RunOptions>{std::move(*b)};
}

// The baseline's command line: the same options with its plan in place of the first, without --compare.
std::vector<std::string> baselineArgs(const std::vector<std::string>& argv, const std::string& planFile, const std::string& other) {
  std::vector<std::string> out;
  bool skip = false;
  for (const auto& a : argv) {
    if (skip) {
      skip = false;
      continue;
    }
    if (a == "--compare") {
      skip = true;
      continue;
    }
    if (a.rfind("--compare=", 0) == 0) continue;
    out.push_back(a == planFile ? other : a);
  }
  return out;
}

int run(const std::vector<std::string>& argv) {
  auto args = app::Args::parse(argv, runOptions());
  if (!args) return report(args.error());
  if (args->has("help") || args->positional().empty()) {
    std::cout << "usage: colo-run PLAN --data FILE [--steps N] [--nproc-per-node K] [--backend gloo|nccl]\n"
                 "                [--checkpoint-dir DIR] [--resume] [--runs-db FILE] [--costdb DB] [--seed S] [--compare PLAN] [--json]\n"
                 "       colo-run prepare TEXT --out FILE.u16\n"
                 "       colo-run runs --runs-db FILE [--json]\n\n"
                 "Trains the plan's model with the plan's parallelism on c10d (Gloo on CPU, NCCL on GPU). Started by\n"
                 "hand it starts the plan's ranks here; under torchrun/SLURM (RANK, WORLD_SIZE, MASTER_ADDR,\n"
                 "MASTER_PORT set) it is one rank of that job.\n\n"
              << app::describeOptions(runOptions());
    return args->has("help") ? 0 : 2;
  }
  if (args->positional().size() > 1) return report(Error::badInput("unexpected argument \"" + args->positional()[1] + "\""));
  const std::string planFile = args->positional().front();
  auto options = optionsFrom(*args, planFile);
  if (!options) return report(options.error());
  if (executor::WorldInfo::launchedByLauncher()) return rankMain(*args, std::move(*options));
  app::reportFatalSignalsAs("launcher");

  auto world = checkBeforeLaunch(*args, *options, planFile);
  if (!world) return report(world.error());
  const std::string resultDir = std::filesystem::temp_directory_path() / ("colo-run-" + std::to_string(getpid()));
  std::filesystem::create_directories(resultDir);
  struct RemoveOnExit {
    std::string dir;
    ~RemoveOnExit() { removeTree(dir); }
  } cleanup{resultDir};
  std::optional<std::string> other;
  auto baseline = baselineOptions(*args, *options, resultDir, other);
  if (!baseline) return report(baseline.error());

  const std::string resultFile = resultDir + "/result.json";
  int code = launch(argv, *world, resultFile);
  std::optional<executor::RunResult> first;
  if (code == 0) {
    auto r = readResult(resultFile);
    if (!r) code = report(r.error());
    else first = std::move(*r);
  }
  if (code != 0) return code;
  if (!*baseline) {
    printResult(*first, args->has("json"));
    return 0;
  }
  if (!args->has("json") && !args->has("quiet")) std::cerr << "colo-run: baseline " << *other << "\n";
  const auto& q = (*baseline)->plan.parallel;
  const std::string baseResult = resultDir + "/baseline.json";
  code = launch(baselineArgs(argv, planFile, *other), static_cast<int>(q.tp * q.pp * q.dp * q.cp), baseResult);
  if (code != 0) return code;
  auto r = readResult(baseResult);
  if (!r) return report(r.error());
  if (args->has("json")) {
    std::cout << Json{{"run", first->toJson()}, {"baseline", r->toJson()}}.dump(2) << "\n";
  } else {
    std::cout << executor::renderResult(*first) << "\n" << executor::renderResult(*r) << "\n" << executor::renderComparison(*first, *r);
  }
  return 0;
}

int prepare(const std::vector<std::string>& argv) {
  auto args = app::Args::parse(argv, {{"out", "FILE", "token file to write (.u16)"}, {"help", "", "show this help"}});
  if (!args) return report(args.error());
  if (args->has("help") || args->positional().size() != 1 || !args->has("out")) {
    std::cout << "usage: colo-run prepare TEXT --out FILE.u16\n\nByte-level tokenizer: every byte of TEXT becomes one "
                 "token (0..255), so any model with a vocabulary of at least 256 can train on it.\n";
    return args->has("help") ? 0 : 2;
  }
  auto r = executor::prepareTokens(corpusFile(args->positional().front()), *args->value("out"));
  if (!r) return report(r.error());
  std::cout << *args->value("out") << ": " << r->tokens << " tokens (byte-level, vocabulary " << r->vocabulary << ")\n";
  return 0;
}

int runs(const std::vector<std::string>& argv) {
  const std::vector<app::OptionSpec> specs{{"runs-db", "FILE", "runs database (colo-run --runs-db)"},
                                           {"json", "", "print JSON"},
                                           {"help", "", "show this help"}};
  auto args = app::Args::parse(argv, specs);
  if (!args) return report(args.error());
  if (args->has("help")) {
    std::cout << "usage: colo-run runs --runs-db FILE [--json]\n\nLists the runs recorded in a runs database: plan, model, "
                 "layout, steps, measured step time beside the prediction, tokens/s and the final loss.\n\n"
              << app::describeOptions(specs);
    return 0;
  }
  const auto file = args->value("runs-db");
  if (!file) return report(Error::badInput("usage: colo-run runs --runs-db FILE [--json]"));
  if (!std::filesystem::exists(*file)) return report(Error::io("no such runs database", *file));
  auto db = executor::RunsDatabase::open(*file);
  if (!db) return report(db.error());
  const auto records = db->runs();
  if (args->has("json")) {
    Json j = Json::array();
    for (const auto& r : records) {
      Json one = r.result.toJson();
      one["id"] = r.id;
      one["started_at"] = r.startedAt;
      j.push_back(one);
    }
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  app::TextTable t({"id", "started", "plan", "model", "layout", "steps", "step time", "predicted", "tokens/s", "final loss"},
                   {true, false, false, false, false, true, true, true, true, true});
  for (const auto& r : records) {
    const auto& x = r.result;
    t.addRow({std::to_string(r.id), r.startedAt, x.planName, x.model,
              "tp" + std::to_string(x.tp) + " pp" + std::to_string(x.pp) + " dp" + std::to_string(x.dp),
              std::to_string(x.losses.size()), formatFixed(x.stepTimeSeconds * 1e3, 1) + " ms",
              formatFixed(x.predictedStepTimeSeconds * 1e3, 1) + " ms", formatFixed(x.tokensPerSecond, 0),
              x.losses.empty() ? "-" : formatFixed(x.losses.back(), 4)});
  }
  std::cout << t.render();
  return 0;
}

}  // namespace
}  // namespace colo

namespace {
int dispatch(const std::vector<std::string>& args) {
  try {
    if (!args.empty() && args[0] == "--version") {
      std::cout << "colo-run " << colo::kVersion << "\n";
      return 0;
    }
    if (!args.empty() && args[0] == "prepare") return colo::prepare({args.begin() + 1, args.end()});
    if (!args.empty() && args[0] == "runs") return colo::runs({args.begin() + 1, args.end()});
    return colo::run(args);
  } catch (const std::exception& e) {
    std::cerr << "colo-run: internal error: " << e.what() << "\n";
    return 1;
  }
}
}  // namespace

int main(int argc, char** argv) {
  const int code = dispatch({argv + 1, argv + argc});
  // Every database, file and process group is closed by its scope by now. What is left are the static
  // destructors of LibTorch's CUDA and NCCL libraries, which can crash at exit (seen on an H200 with
  // PyTorch 2.11: signal 11 after the last step, the result never printed). The output is flushed and
  // the process leaves without them.
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(code);
}
