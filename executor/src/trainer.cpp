// One rank of a training job: builds this rank's chunks and model states, runs the plan's pipeline
// schedule over micro-batches, reduces gradients, clips, steps the optimizer and checkpoints.
#include <dlfcn.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "colo/core/units.h"
#include "colo/costmodel/cost_db.h"
#include "colo/costmodel/evaluator.h"
#include "colo/costmodel/timeline.h"
#include "colo/executor/data.h"
#include "colo/executor/executor.h"
#include "checkpoint.h"
#include "comm.h"
#include "device.h"
#include "model.h"
#include "ring_attention.h"
#include "state.h"
#include "trace.h"

namespace colo::executor {
namespace {

using Clock = std::chrono::steady_clock;
using detail::Chunk;
using detail::Comm;
using detail::Param;
using torch::Tensor;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Adds the time of a LibTorch call (forward, backward, communication, optimizer math) to `total`.
template <class F>
auto timed(double& total, F&& f) {
  const auto t = Clock::now();
  if constexpr (std::is_void_v<decltype(f())>) {
    f();
    total += since(t);
  } else {
    auto r = f();
    total += since(t);
    return r;
  }
}

// OpenBLAS keeps its own thread pool besides LibTorch's intra-op threads; both at once oversubscribe
// the cores (measured here: a tiny-gpt step 0.67 s with both at 2 threads, 0.28 s with OpenBLAS at 1).
void singleThreadedBlas() {
  using SetThreads = void (*)(int);
  if (auto* set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(1);
}

double residentBytes() {
  std::ifstream statm("/proc/self/statm");
  double pages = 0;
  double resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return resident * static_cast<double>(sysconf(_SC_PAGESIZE));
}

double peakResidentBytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;
}

// The predictions the run is compared with: the plan's own, or re-evaluated with the cost database
// given (this machine's measured kernels and collectives), with the parts that compare like with like.
Result<void> predict(const Plan& plan, const std::string& costDbFile, RunResult& result) {
  std::optional<costmodel::CostDatabase> db;
  if (!costDbFile.empty()) {
    auto opened = costmodel::CostDatabase::open(costDbFile);
    if (!opened) return fail(opened.error());
    db = std::move(*opened);
  }
  auto ev = costmodel::evaluatePlan(plan, db ? &*db : nullptr);
  if (!ev) return fail(ev.error());
  const bool stored = !db && plan.predictions.stepTimeSeconds && plan.predictions.peakMemoryBytes;
  result.predictedStepTimeSeconds = stored ? *plan.predictions.stepTimeSeconds : ev->stepSeconds;
  result.predictedPeakMemoryBytes = stored ? *plan.predictions.peakMemoryBytes : ev->peakMemoryBytes;
  const auto& t = ev->time;
  result.predictedComputeSeconds = t.compute + t.recompute + t.gradAccum + t.optimizer;
  for (const auto& st : ev->stages) {
    const auto& m = st.memory;
    result.predictedTensorBytes = std::max(result.predictedTensorBytes, m.total() - m.allocator - m.context);
    result.predictedModelStateBytes = std::max(result.predictedModelStateBytes, m.weights + m.gradients + m.optimizer);
    result.predictedHostMemoryBytes = std::max(result.predictedHostMemoryBytes, m.host);
    result.predictedOffloadCopySeconds = std::max(result.predictedOffloadCopySeconds, st.offloadPcieSeconds);
  }
  result.predictionSource = db ? "cost database " + costDbFile + " (measured kernels and collectives)"
                               : "the analytic model of cluster " + plan.cluster.name +
                                     " (no measured cost database: colo-profile one and pass --costdb)";
  return {};
}


// Linear warm-up, then cosine decay to the minimum at the last step.
double learningRate(const RunOptions& o, std::int64_t step) {
  if (step < o.warmupSteps) return o.learningRate * static_cast<double>(step + 1) / static_cast<double>(o.warmupSteps);
  const double progress =
      o.steps > o.warmupSteps ? static_cast<double>(step - o.warmupSteps) / static_cast<double>(o.steps - o.warmupSteps) : 1.0;
  return o.minLearningRate + 0.5 * (o.learningRate - o.minLearningRate) * (1.0 + std::cos(M_PI * progress));
}

// This rank's chunks: chunk c runs on stage c % pp; its layers follow the plan's stages.
std::map<std::int64_t, std::unique_ptr<Chunk>> buildChunks(const Plan& plan, const detail::ModelConfig& cfg, int ppRank) {
  const std::int64_t pp = plan.parallel.pp, chunks = pp * plan.parallel.virtualStages;
  std::map<std::int64_t, std::unique_ptr<Chunk>> mine;
  std::int64_t first = 0;
  for (std::int64_t c = 0; c < chunks; ++c) {
    const StagePlan& stage = plan.stages[static_cast<std::size_t>(c)];
    if (c % pp == ppRank) mine[c] = std::make_unique<Chunk>(cfg, first, stage.layers, c == 0, c == chunks - 1, stage);
    first += stage.layers;
  }
  return mine;
}

using States = std::vector<std::unique_ptr<detail::ModelState>>;

// Weights and optimizer moments of every parameter, re-sharded from whatever plan wrote them; returns
// the checkpoint's step.
Result<std::int64_t> resume(const RunOptions& o, const ModelSpec& spec, States& states, std::string& dir) {
  auto newest = latestCheckpoint(o.checkpointDir);
  if (!newest) return fail(newest.error());
  dir = *newest;
  std::int64_t savedStep = 0;
  std::string savedModel;
  auto pieces = detail::readPieces(dir, savedStep, savedModel);
  if (!pieces) return fail(pieces.error());
  if (savedModel != spec.name) return fail(Error::badInput("checkpoint of model " + savedModel + ", the plan trains " + spec.name, dir));
  for (auto& state : states) {
    const std::int64_t n = state->flatSize();
    Tensor master = torch::zeros({n}, torch::kFloat32), m = torch::zeros({n}, torch::kFloat32), v = torch::zeros({n}, torch::kFloat32);
    for (const auto& s : state->slots()) {
      auto it = pieces->find(s.param->name);
      if (it == pieces->end()) return fail(Error::badInput("checkpoint has no parameter " + s.param->name, dir));
      auto loaded = detail::loadParam(*s.param, it->second, dir);
      if (!loaded) return fail(loaded.error());
      master.narrow(0, s.offset, s.numel).copy_((*loaded)[0]);
      m.narrow(0, s.offset, s.numel).copy_((*loaded)[1]);
      v.narrow(0, s.offset, s.numel).copy_((*loaded)[2]);
    }
    state->load(master, m, v);
  }
  if (savedStep >= o.steps) {
    return fail(Error::badInput("the checkpoint is at step " + std::to_string(savedStep) + ", --steps is " + std::to_string(o.steps) +
                                ": nothing left to run"));
  }
  return savedStep;
}

// Each parameter once: rank 0 of its data-parallel group writes it (the routed experts' group is
// another); then `latest` once every shard is down.
Result<void> checkpoint(const RunOptions& o, const Plan& plan, detail::Groups& g, int rank, std::int64_t step, States& states,
                        std::string& lastCheckpoint) {
  const std::string dir = o.checkpointDir + "/" + detail::stepDir(step);
  std::vector<detail::ShardPart> parts;
  for (auto& state : states) {
    auto full = state->gatherFull();
    const bool writer = (state->experts() ? g.expertDp : g.dpCp)->rank() == 0;
    if (writer) parts.push_back({&state->slots(), full[0], full[1], full[2]});
  }
  if (!parts.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return fail(Error::io("cannot create: " + ec.message(), dir));
    if (auto wrote = detail::writeShard(dir, rank, plan, step, parts); !wrote) return fail(wrote.error());
  }
  g.world->barrier();
  if (rank == 0) {
    const std::string tmp = o.checkpointDir + "/latest.tmp";
    {
      std::ofstream latest(tmp, std::ios::trunc);
      latest << detail::stepDir(step) << "\n";
    }
    std::error_code ec;
    std::filesystem::rename(tmp, o.checkpointDir + "/latest", ec);
    if (ec) return fail(Error::io("cannot rename: " + ec.message(), o.checkpointDir + "/latest"));
  }
  g.world->barrier();
  lastCheckpoint = dir;
  return {};
}

// The plan's schedule for this stage: the simulator's order of forwards and backwards.
Result<std::vector<costmodel::TimelineEvent>> stageOrder(const Plan& plan, std::int64_t microBatches, int ppRank) {
  costmodel::ScheduleInput schedule;
  schedule.schedule = plan.schedule;
  schedule.pp = plan.parallel.pp;
  schedule.virtualStages = plan.parallel.virtualStages;
  schedule.microBatches = microBatches;
  const auto chunks = static_cast<std::size_t>(plan.parallel.pp * plan.parallel.virtualStages);
  schedule.forwardSeconds.assign(chunks, 1.0);
  schedule.backwardSeconds.assign(chunks, 2.0);
  auto timeline = costmodel::simulateSchedule(schedule);
  if (!timeline) return fail(timeline.error());
  std::vector<costmodel::TimelineEvent> order;
  for (const auto& e : timeline->events) {
    if (e.stage == ppRank) order.push_back(e);
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.startSeconds < b.startSeconds; });
  return order;
}

RunResult describeRun(const RunOptions& o, const WorldInfo& w, std::int64_t firstStep) {
  const Plan& plan = o.plan;
  RunResult result;
  result.planName = plan.name.empty() ? std::filesystem::path(o.planFile).stem().string() : plan.name;
  result.planHash = contentHash(planToJson(plan));
  result.model = plan.model.spec->name;
  result.device = o.backend == "gloo" ? "cpu" : "cuda";
  result.backend = o.backend;
  result.world = w.world;
  result.tp = plan.parallel.tp;
  result.pp = plan.parallel.pp;
  result.dp = plan.parallel.dp;
  result.vpp = plan.parallel.virtualStages;
  result.firstStep = firstStep;
  result.tokensPerStep = plan.globalBatchSize * plan.seqLen;
  return result;
}

}  // namespace

Result<RunResult> runRank(const RunOptions& o, const WorldInfo& w) {
  const Plan& plan = o.plan;
  if (auto ok = checkExecutable(plan, w.world, o.backend); !ok) return fail(ok.error());
  if (o.steps < 1) return fail(Error::badInput("--steps must be at least 1"));
  auto data = TokenData::open(o.dataFile);
  if (!data) return fail(data.error());
  const ModelSpec& spec = *plan.model.spec;
  if (data->maxToken() >= static_cast<std::uint64_t>(spec.vocabSize)) {
    return fail(Error::badInput("token id " + std::to_string(data->maxToken()) + " is outside the model's vocabulary of " +
                                    std::to_string(spec.vocabSize),
                                o.dataFile));
  }
  const std::string tag = "rank " + std::to_string(w.rank) + ": ";
  try {
    const int threads = o.threads > 0 ? o.threads
                                      : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, w.localWorld));
    at::set_num_threads(threads);
    singleThreadedBlas();
    torch::manual_seed(o.seed);
    const auto& par = plan.parallel;
    const bool tied = spec.tieWordEmbeddings;
    auto deviceOr = detail::Device::forBackend(o.backend, w.localRank);
    if (!deviceOr) return fail(deviceOr.error());
    detail::Device& device = *deviceOr;
    const torch::Device dev = device.device();
    auto groupsOr = detail::makeGroups(w, par, tied, o.backend, o.timeoutSeconds, dev);
    if (!groupsOr) return fail(groupsOr.error());
    detail::Groups& g = *groupsOr;
    const double residentBeforeModel = residentBytes();

    detail::ModelConfig cfg;
    cfg.spec = spec;
    cfg.seqLen = plan.seqLen;
    cfg.paddedVocab = detail::paddedVocabulary(spec.vocabSize, static_cast<int>(par.tp));
    cfg.tp = static_cast<int>(par.tp);
    cfg.tpRank = g.tpRank;
    cfg.sequenceParallel = par.sequenceParallel;
    cfg.tpComm = g.tp.get();
    cfg.cp = static_cast<int>(par.cp);
    cfg.cpRank = g.cpRank;
    cfg.cpComm = g.cp.get();
    cfg.ep = static_cast<int>(par.ep);
    cfg.epRank = g.epRank;
    cfg.epComm = g.ep.get();
    cfg.seed = o.seed;
    cfg.device = dev;
    if (o.fusedKernels == FusedKernels::kOn) cfg.fused = detail::FusedKernelSet::all();
    if (o.fusedKernels == FusedKernels::kAuto && device.cuda() && kernels::torch_ops::cudaAvailable()) {
      cfg.fused = detail::FusedKernelSet::fasterOnGpu();
    }
    cfg.auxLossScale = o.moeAuxLossCoeff / static_cast<double>(plan.globalBatchSize / (plan.microBatchSize * par.dp) * par.tp);
    auto mine = buildChunks(plan, cfg, g.ppRank);
    for (auto& [c, chunk] : mine) chunk->useDeferredLinears(plan.schedule == Schedule::kZeroBubble);
    const std::int64_t pp = par.pp, chunks = pp * par.virtualStages, dp = par.dp;

    // The model states under the plan's ZeRO stage; bf16 plans compute with bf16 copies of fp32 masters.
    const bool mixed = plan.precision == DType::kBf16;
    const torch::Dtype compute = mixed ? torch::kBFloat16 : torch::kFloat32;
    std::vector<Chunk*> chunkList;
    for (auto& [c, chunk] : mine) chunkList.push_back(chunk.get());
    // The routed experts (MoE with ep > 1) reduce over their own group: the other ranks with their experts.
    States states;
    using Params = detail::ModelState::Config::Params;
    const bool expertGroup = spec.moe.enabled() && par.ep > 1;
    for (const Params which : expertGroup ? std::vector<Params>{Params::kDense, Params::kExperts} : std::vector<Params>{Params::kAll}) {
      const bool experts = which == Params::kExperts;
      detail::ModelState::Config stateConfig;
      stateConfig.params = which;
      stateConfig.zeroStage = plan.zeroStage;
      stateConfig.dp = experts ? dp * par.cp / par.ep : dp * par.cp;
      stateConfig.average = static_cast<double>(dp * par.cp);
      stateConfig.mixed = mixed;
      stateConfig.reshardAfterForward = pp == 1;
      stateConfig.offloadFraction = plan.offload.optimizerFraction;
      stateConfig.overlap = o.overlap;
      stateConfig.device = dev;
      states.push_back(std::make_unique<detail::ModelState>(chunkList, stateConfig, g));
    }
    auto forEach = [&](auto&& f) {
      for (auto& state : states) f(*state);
    };

    std::int64_t firstStep = 0;
    std::string lastCheckpoint;
    if (o.resume) {
      auto resumed = resume(o, spec, states, lastCheckpoint);
      if (!resumed) return fail(resumed.error());
      firstStep = *resumed;
    }

    const std::int64_t mbs = plan.microBatchSize;
    const std::int64_t mLocal = plan.globalBatchSize / (mbs * dp);
    auto orderOr = stageOrder(plan, mLocal, g.ppRank);
    if (!orderOr) return fail(orderOr.error());
    const auto& order = *orderOr;

    RunResult result = describeRun(o, w, firstStep);
    result.device = device.describe();
    result.fusedKernelNames = cfg.fused.usedBy(spec, plan.optimizer).names();
    result.fusedKernels = !result.fusedKernelNames.empty();
    if (auto predicted = predict(plan, o.costDbFile, result); !predicted) return fail(predicted.error());

    // Fault injection for tests: COLO_RUN_FAULT=RANK:STEP[:SIGNAL] sends that rank the signal (default
    // SIGKILL; 11: a crash) at the start of that step.
    int faultRank = -1, faultSignal = SIGKILL;
    std::int64_t faultStep = -1;
    if (const char* f = std::getenv("COLO_RUN_FAULT")) {
      std::sscanf(f, "%d:%lld:%d", &faultRank, reinterpret_cast<long long*>(&faultStep), &faultSignal);
    }

    const std::int64_t seq = plan.seqLen;
    const bool sp = par.sequenceParallel && par.tp > 1;
    // Context parallelism: this rank's tokens are two chunks of the sequence (ring_attention.h).
    const Tensor positions = detail::contextParallelPositions(seq, static_cast<int>(par.cp), g.cpRank).to(dev);
    const std::int64_t seqLocal = (sp ? seq / par.tp : seq) / par.cp;
    const std::int64_t hidden = spec.hiddenSize;
    double libtorch = 0;
    detail::StepTrace trace(w.rank == 0 ? o.traceFile : std::string(), device.cuda(), "colo-run");
    const auto runStart = Clock::now();
    double stepStartBytes = 0, forwardHeld = 0;  // the allocator's, on a GPU: the last step's (RunResult)
    for (std::int64_t step = firstStep; step < o.steps; ++step) {
      if (w.rank == faultRank && step == faultStep) std::raise(faultSignal);
      if (step == std::max(firstStep, o.steps - o.traceSteps)) trace.start();
      const auto stepStart = Clock::now();
      device.startStep();
      forEach([](detail::ModelState& st) { st.beginStep(); });
      stepStartBytes = device.allocatedBytes();
      forwardHeld = 0;
      // Inputs and labels of this rank's micro-batch j: global samples dpRank * mLocal * mbs + j * mbs + i.
      auto tokens = [&](std::int64_t j) {
        std::vector<std::int64_t> flat;
        for (std::int64_t i = 0; i < mbs; ++i) {
          auto sample = data->sample(o.seed, step, g.dpRank * mLocal * mbs + j * mbs + i, seq);
          flat.insert(flat.end(), sample.begin(), sample.end());
        }
        return torch::tensor(flat, torch::kInt64).view({mbs, seq + 1}).to(dev);
      };
      std::map<std::pair<std::int64_t, std::int64_t>, std::pair<Tensor, Tensor>> live;  // (chunk, mb) -> (input, output)
      std::vector<detail::WorkPtr> sends;
      double lossSum = 0;
      auto tagOf = [&](std::int64_t chunk, std::int64_t mb, bool gradient) {
        return static_cast<int>(2 * (mb * chunks + chunk) + (gradient ? 1 : 0));
      };
      for (const auto& e : order) {
        const std::int64_t c = e.chunk, j = e.microBatch;
        Chunk& chunk = *mine.at(c);
        if (e.kind == costmodel::TaskKind::kForward) {
          Tensor input, labels;
          if (c == 0 || c == chunks - 1) {
            Tensor t = tokens(j);
            input = t.narrow(1, 0, seq).index_select(1, positions);
            labels = t.narrow(1, 1, seq).index_select(1, positions);
          }
          if (c > 0) {
            input = torch::empty({mbs, seqLocal, hidden}, torch::TensorOptions().dtype(compute).device(dev));
            timed(libtorch, [&] { g.pp->recv(input, static_cast<int>((c - 1) % pp), tagOf(c - 1, j, false)); });
            input.requires_grad_(true);
          }
          Tensor out = timed(libtorch, [&] {
            RECORD_USER_SCOPE(detail::kPhaseForward);
            return chunk.forward(input, labels, {step, j});
          });
          forwardHeld = std::max(forwardHeld, device.allocatedBytes() - stepStartBytes);
          if (c == chunks - 1) {
            lossSum += out.item<double>();
          } else {
            Tensor send = out.detach().contiguous();
            sends.push_back(timed(libtorch, [&] { return g.pp->send(send, static_cast<int>((c + 1) % pp), tagOf(c, j, false)); }));
          }
          live[{c, j}] = {input, out};
        } else if (e.kind == costmodel::TaskKind::kBackwardWeight) {
          // Zero-bubble: the weight gradients this micro-batch's input backward left for later.
          // Under ZeRO-2/3 they complete the units the input backward held, which are reduce-scattered now.
          timed(libtorch, [&] {
            RECORD_USER_SCOPE(detail::kPhaseBackward);
            chunk.weightGradients(j, [&](const Tensor& weight, const Tensor& gradient) {
              bool taken = false;
              forEach([&](detail::ModelState& st) { taken = taken || st.addWeightGradient(j, weight, gradient); });
              return taken;
            });
            forEach([&](detail::ModelState& st) {
              st.releaseHeld(j);
              st.afterBackward();
            });
          });
        } else {
          const std::int64_t deferred = e.kind == costmodel::TaskKind::kBackwardInput ? j : -1;
          chunk.deferWeightGradients(deferred);
          forEach([&](detail::ModelState& st) { st.holdGradients(deferred); });
          auto& [input, out] = live.at({c, j});
          if (c == chunks - 1) {
            timed(libtorch, [&] {
              RECORD_USER_SCOPE(detail::kPhaseBackward);
              torch::autograd::backward({out / static_cast<double>(mLocal)});
            });
          } else {
            Tensor grad = torch::empty({mbs, seqLocal, hidden}, torch::TensorOptions().dtype(compute).device(dev));
            timed(libtorch, [&] {
              g.pp->recv(grad, static_cast<int>((c + 1) % pp), tagOf(c, j, true));
              RECORD_USER_SCOPE(detail::kPhaseBackward);
              torch::autograd::backward({out}, {grad});
            });
          }
          if (c > 0) {
            Tensor send = input.grad().contiguous();
            sends.push_back(timed(libtorch, [&] { return g.pp->send(send, static_cast<int>((c - 1) % pp), tagOf(c - 1, j, true)); }));
          }
          live.erase({c, j});
          chunk.deferWeightGradients(-1);
          forEach([](detail::ModelState& st) { st.holdGradients(-1); });
          timed(libtorch, [&] {
            RECORD_USER_SCOPE(detail::kPhaseBackward);
            forEach([](detail::ModelState& st) { st.afterBackward(); });
          });
        }
      }
      for (auto& s : sends) timed(libtorch, [&] { s->wait(); });
      for (auto& [c, chunk] : mine) chunk->endStep();
      timed(libtorch, [&] { forEach([](detail::ModelState& st) { st.endStep(); }); });

      const double gradNorm = timed(libtorch, [&] {
        RECORD_USER_SCOPE(detail::kPhaseReduce);
        Tensor squares = torch::zeros({1}, torch::kFloat64);
        forEach([&](detail::ModelState& st) { squares += st.reduceGradients(o.bucketBytes, tied && pp > 1, cfg.fused.gradNorm); });
        g.world->allReduce(squares);
        return std::sqrt(squares.item<double>());
      });
      detail::OptimizerSettings opt;
      opt.kind = plan.optimizer;
      opt.lr = learningRate(o, step);
      opt.beta1 = o.beta1;
      opt.beta2 = o.beta2;
      opt.epsilon = o.epsilon;
      opt.weightDecay = o.weightDecay;
      opt.momentum = o.momentum;
      opt.trust = o.trustCoefficient;
      opt.step = step + 1;
      opt.fused = cfg.fused.adamw;
      opt.clip = o.clipNorm > 0 ? std::min(1.0, o.clipNorm / (gradNorm + 1e-6)) : 1.0;
      timed(libtorch, [&] {
        RECORD_USER_SCOPE(detail::kPhaseOptimizer);
        forEach([&](detail::ModelState& st) { st.step(opt); });
      });

      // The step's loss over all micro-batches of all replicas (the last stage's first tp rank has it).
      Tensor loss = torch::zeros({1}, torch::kFloat64);
      if (mine.contains(chunks - 1) && g.tpRank == 0) loss += lossSum;
      timed(libtorch, [&] { g.world->allReduce(loss); });
      const double stepLoss = loss.item<double>() / static_cast<double>(mLocal * dp * par.cp);  // each cp rank: its tokens' mean
      const double seconds = device.stepSeconds(since(stepStart));
      result.losses.push_back(stepLoss);
      result.stepSeconds.push_back(seconds);
      result.gradNorms.push_back(gradNorm);
      if (w.rank == 0 && o.progress) {
        std::cerr << "step " << step + 1 << "/" << o.steps << "  loss " << formatFixed(stepLoss, 4) << "  grad norm "
                  << formatFixed(gradNorm, 3) << "  " << formatFixed(seconds * 1e3, 1) << " ms  "
                  << formatFixed(static_cast<double>(result.tokensPerStep) / seconds, 0) << " tokens/s\n";
      }
      const bool due = !o.checkpointDir.empty() &&
                       ((o.checkpointEvery > 0 && (step + 1) % o.checkpointEvery == 0) || step + 1 == o.steps);
      if (due) {
        if (auto wrote = checkpoint(o, plan, g, w.rank, step + 1, states, lastCheckpoint); !wrote) return fail(wrote.error());
      }
    }
    if (const std::string traced = trace.stop(); !traced.empty()) std::cerr << "colo-run: " << traced << "\n";
    result.wallSeconds = since(runStart);
    result.computeSeconds = libtorch;
    result.checkpoint = lastCheckpoint;
    std::vector<double> steady(result.stepSeconds.begin() + (result.stepSeconds.size() > 1 ? 1 : 0), result.stepSeconds.end());
    std::sort(steady.begin(), steady.end());
    result.stepTimeSeconds = steady[steady.size() / 2];
    result.tokensPerSecond = static_cast<double>(result.tokensPerStep) / result.stepTimeSeconds;
    // On a GPU: LibTorch's caching allocator, peak allocated (what the planner predicts) and reserved.
    const double peakResident = device.cuda() ? device.peakReservedBytes() : peakResidentBytes();
    double modelStates = 0, hostBytes = 0, copySeconds = 0, waitSeconds = 0;
    forEach([&](detail::ModelState& st) {
      modelStates += st.peakModelStateBytes();
      hostBytes += st.hostBytes();
      copySeconds += st.copySeconds();
      waitSeconds += st.commWaitSeconds();
    });
    const auto stepsRun = static_cast<double>(std::max<std::size_t>(1, result.losses.size()));
    result.offloadCopySeconds = copySeconds / stepsRun;
    result.zeroCommWaitSeconds = waitSeconds / stepsRun;
    const double tensorBytes = device.cuda() ? device.peakAllocatedBytes() : peakResident - residentBeforeModel;
    Tensor peak = torch::tensor({peakResident, tensorBytes, modelStates, hostBytes, stepStartBytes, forwardHeld}, torch::kFloat64);
    g.world->allReduce(peak, c10d::ReduceOp::MAX);
    result.peakMemoryBytes = peak[0].item<double>();
    result.tensorMemoryBytes = peak[1].item<double>();
    result.modelStateBytes = peak[2].item<double>();
    result.hostMemoryBytes = peak[3].item<double>();
    result.stepStartTensorBytes = peak[4].item<double>();
    result.forwardHeldBytes = peak[5].item<double>();
    g.world->barrier();
    return result;
  } catch (const c10::Error& e) {
    return fail(Error::internal(tag + e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return fail(Error::internal(tag + e.what()));
  }
}

}  // namespace colo::executor
