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

using detail::States;

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

// The model's configuration on this rank: its tensor-, context- and expert-parallel groups and ranks,
// the device, and the fused kernels the run asked for.
detail::ModelConfig modelConfig(const RunOptions& o, const detail::Groups& g, const detail::Device& device) {
  const Plan& plan = o.plan;
  const auto& par = plan.parallel;
  const ModelSpec& spec = *plan.model.spec;
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
  cfg.device = device.device();
  if (o.fusedKernels == FusedKernels::kOn) cfg.fused = detail::FusedKernelSet::all();
  if (o.fusedKernels == FusedKernels::kAuto && device.cuda() && kernels::torch_ops::cudaAvailable()) {
    cfg.fused = detail::FusedKernelSet::fasterOnGpu().withoutEager(plan.execution.unfused, plan.execution.torchCrossEntropy);
  }
  cfg.auxLossScale = o.moeAuxLossCoeff / static_cast<double>(plan.globalBatchSize / (plan.microBatchSize * par.dp) * par.tp);
  return cfg;
}

// The model states under the plan's ZeRO stage; bf16 plans compute with bf16 copies of fp32 masters.
// The routed experts (MoE with ep > 1) reduce over their own group: the other ranks with their experts.
States makeStates(const RunOptions& o, const std::vector<Chunk*>& chunkList, detail::Groups& g, torch::Device dev) {
  const Plan& plan = o.plan;
  const auto& par = plan.parallel;
  States states;
  using Params = detail::ModelState::Config::Params;
  const bool expertGroup = plan.model.spec->moe.enabled() && par.ep > 1;
  for (const Params which : expertGroup ? std::vector<Params>{Params::kDense, Params::kExperts} : std::vector<Params>{Params::kAll}) {
    const bool experts = which == Params::kExperts;
    detail::ModelState::Config stateConfig;
    stateConfig.params = which;
    stateConfig.zeroStage = plan.zeroStage;
    stateConfig.dp = experts ? par.dp * par.cp / par.ep : par.dp * par.cp;
    stateConfig.average = static_cast<double>(par.dp * par.cp);
    stateConfig.mixed = plan.precision == DType::kBf16;
    stateConfig.reshardAfterForward = par.pp == 1;
    stateConfig.offloadFraction = plan.offload.optimizerFraction;
    stateConfig.overlap = o.overlap;
    stateConfig.device = dev;
    states.push_back(std::make_unique<detail::ModelState>(chunkList, stateConfig, g));
  }
  return states;
}

// One rank's training: its chunks of the model and their states, built once (before a resume loads
// the states), the pipeline order of its forward and backward tasks (set after), then stepped: the
// schedule over micro-batches, the gradient reduction, the optimizer step.
class RankRun {
 public:
  RankRun(const RunOptions& o, const TokenData& data, detail::Device& device, detail::Groups& g)
      : m_o(o), m_plan(o.plan), m_data(data), m_device(device), m_g(g), m_cfg(modelConfig(o, g, device)) {
    const auto& par = m_plan.parallel;
    m_mine = buildChunks(m_plan, m_cfg, g.ppRank);
    std::vector<Chunk*> chunkList;
    for (auto& [c, chunk] : m_mine) {
      chunk->useDeferredLinears(m_plan.schedule == Schedule::kZeroBubble);
      chunkList.push_back(chunk.get());
    }
    m_states = makeStates(o, chunkList, g, device.device());
    m_compute = m_plan.precision == DType::kBf16 ? torch::kBFloat16 : torch::kFloat32;
    m_pp = par.pp;
    m_chunks = par.pp * par.virtualStages;
    m_mbs = m_plan.microBatchSize;
    m_mLocal = m_plan.globalBatchSize / (m_mbs * par.dp);
    m_seq = m_plan.seqLen;
    // Context parallelism: this rank's tokens are two chunks of the sequence (ring_attention.h).
    m_positions = detail::contextParallelPositions(m_seq, static_cast<int>(par.cp), g.cpRank).to(device.device());
    const bool sp = par.sequenceParallel && par.tp > 1;
    m_seqLocal = (sp ? m_seq / par.tp : m_seq) / par.cp;
  }

  States& states() { return m_states; }
  const detail::ModelConfig& config() const { return m_cfg; }
  std::int64_t localMicroBatches() const { return m_mLocal; }
  void setOrder(std::vector<costmodel::TimelineEvent> order) { m_order = std::move(order); }
  double libtorchSeconds() const { return m_libtorch; }

  // The step's forward and backward tasks in the pipeline's order; returns the sum of the losses this
  // rank computed (the last chunk's micro-batches).
  double runSchedule(std::int64_t step) {
    m_device.startStep();
    forEach([](detail::ModelState& st) { st.beginStep(); });
    m_stepStartBytes = m_device.allocatedBytes();
    m_forwardHeld = 0;
    Live live;
    std::vector<detail::WorkPtr> sends;
    double lossSum = 0;
    for (const auto& e : m_order) {
      if (e.kind == costmodel::TaskKind::kForward) {
        lossSum += forward(step, e.chunk, e.microBatch, live, sends);
      } else if (e.kind == costmodel::TaskKind::kBackwardWeight) {
        backwardWeights(e.chunk, e.microBatch);
      } else {
        backward(e, live, sends);
      }
    }
    for (auto& s : sends) timed(m_libtorch, [&] { s->wait(); });
    for (auto& [c, chunk] : m_mine) chunk->endStep();
    timed(m_libtorch, [&] { forEach([](detail::ModelState& st) { st.endStep(); }); });
    return lossSum;
  }

  // Reduces (or reduce-scatters) the gradients; returns the global gradient norm.
  double reduceGradients() {
    const bool tiedAcrossStages = m_plan.model.spec->tieWordEmbeddings && m_pp > 1;
    return timed(m_libtorch, [&] {
      RECORD_USER_SCOPE(detail::kPhaseReduce);
      Tensor squares = torch::zeros({1}, torch::kFloat64);
      forEach([&](detail::ModelState& st) { squares += st.reduceGradients(m_o.bucketBytes, tiedAcrossStages, m_cfg.fused.gradNorm); });
      m_g.world->allReduce(squares);
      return std::sqrt(squares.item<double>());
    });
  }

  void optimizerStep(std::int64_t step, double gradNorm) {
    detail::OptimizerSettings opt;
    opt.kind = m_plan.optimizer;
    opt.lr = learningRate(m_o, step);
    opt.beta1 = m_o.beta1;
    opt.beta2 = m_o.beta2;
    opt.epsilon = m_o.epsilon;
    opt.weightDecay = m_o.weightDecay;
    opt.momentum = m_o.momentum;
    opt.trust = m_o.trustCoefficient;
    opt.step = step + 1;
    opt.fused = m_cfg.fused.adamw;
    opt.clip = m_o.clipNorm > 0 ? std::min(1.0, m_o.clipNorm / (gradNorm + 1e-6)) : 1.0;
    timed(m_libtorch, [&] {
      RECORD_USER_SCOPE(detail::kPhaseOptimizer);
      forEach([&](detail::ModelState& st) { st.step(opt); });
    });
  }

  // The step's loss over all micro-batches of all replicas (the last stage's first tp rank has it);
  // each cp rank contributes its tokens' mean.
  double meanLoss(double lossSum) {
    const auto& par = m_plan.parallel;
    Tensor loss = torch::zeros({1}, torch::kFloat64);
    if (m_mine.contains(m_chunks - 1) && m_g.tpRank == 0) loss += lossSum;
    timed(m_libtorch, [&] { m_g.world->allReduce(loss); });
    return loss.item<double>() / static_cast<double>(m_mLocal * par.dp * par.cp);
  }

  // The run's memory figures, the maximum over ranks (on a GPU: LibTorch's caching allocator, peak
  // allocated, what the planner predicts, and reserved), and this rank's offload copy and ZeRO wait
  // seconds per step.
  void reportMemory(RunResult& result, double residentBeforeModel) {
    const double peakResident = m_device.cuda() ? m_device.peakReservedBytes() : peakResidentBytes();
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
    const double tensorBytes = m_device.cuda() ? m_device.peakAllocatedBytes() : peakResident - residentBeforeModel;
    Tensor peak = torch::tensor({peakResident, tensorBytes, modelStates, hostBytes, m_stepStartBytes, m_forwardHeld}, torch::kFloat64);
    m_g.world->allReduce(peak, c10d::ReduceOp::MAX);
    result.peakMemoryBytes = peak[0].item<double>();
    result.tensorMemoryBytes = peak[1].item<double>();
    result.modelStateBytes = peak[2].item<double>();
    result.hostMemoryBytes = peak[3].item<double>();
    result.stepStartTensorBytes = peak[4].item<double>();
    result.forwardHeldBytes = peak[5].item<double>();
  }

 private:
  using Live = std::map<std::pair<std::int64_t, std::int64_t>, std::pair<Tensor, Tensor>>;  // (chunk, mb) -> (input, output)

  template <class F>
  void forEach(F&& f) {
    for (auto& state : m_states) f(*state);
  }

  // Inputs and labels of this rank's micro-batch j: global samples dpRank * mLocal * mbs + j * mbs + i.
  Tensor tokens(std::int64_t step, std::int64_t j) const {
    std::vector<std::int64_t> flat;
    for (std::int64_t i = 0; i < m_mbs; ++i) {
      auto sample = m_data.sample(m_o.seed, step, m_g.dpRank * m_mLocal * m_mbs + j * m_mbs + i, m_seq);
      flat.insert(flat.end(), sample.begin(), sample.end());
    }
    return torch::tensor(flat, torch::kInt64).view({m_mbs, m_seq + 1}).to(m_device.device());
  }

  int tagOf(std::int64_t chunk, std::int64_t mb, bool gradient) const {
    return static_cast<int>(2 * (mb * m_chunks + chunk) + (gradient ? 1 : 0));
  }

  // An activation (or its gradient) as it crosses between stages.
  Tensor boundaryTensor() const {
    return torch::empty({m_mbs, m_seqLocal, m_plan.model.spec->hiddenSize},
                        torch::TensorOptions().dtype(m_compute).device(m_device.device()));
  }

  // Chunk c's forward of micro-batch j: its input from the tokens or the previous stage, its output to
  // the next stage; returns the loss on the last chunk, else 0.
  double forward(std::int64_t step, std::int64_t c, std::int64_t j, Live& live, std::vector<detail::WorkPtr>& sends) {
    Chunk& chunk = *m_mine.at(c);
    Tensor input, labels;
    if (c == 0 || c == m_chunks - 1) {
      Tensor t = tokens(step, j);
      input = t.narrow(1, 0, m_seq).index_select(1, m_positions);
      labels = t.narrow(1, 1, m_seq).index_select(1, m_positions);
    }
    if (c > 0) {
      input = boundaryTensor();
      timed(m_libtorch, [&] { m_g.pp->recv(input, static_cast<int>((c - 1) % m_pp), tagOf(c - 1, j, false)); });
      input.requires_grad_(true);
    }
    Tensor out = timed(m_libtorch, [&] {
      RECORD_USER_SCOPE(detail::kPhaseForward);
      return chunk.forward(input, labels, {step, j});
    });
    m_forwardHeld = std::max(m_forwardHeld, m_device.allocatedBytes() - m_stepStartBytes);
    double loss = 0;
    if (c == m_chunks - 1) {
      loss = out.item<double>();
    } else {
      Tensor send = out.detach().contiguous();
      sends.push_back(timed(m_libtorch, [&] { return m_g.pp->send(send, static_cast<int>((c + 1) % m_pp), tagOf(c, j, false)); }));
    }
    live[{c, j}] = {input, out};
    return loss;
  }

  // Zero-bubble: the weight gradients micro-batch j's input backward left for later. Under ZeRO-2/3
  // they complete the units the input backward held, which are reduce-scattered now.
  void backwardWeights(std::int64_t c, std::int64_t j) {
    Chunk& chunk = *m_mine.at(c);
    timed(m_libtorch, [&] {
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
  }

  // A backward (whole, or the input half under zero-bubble): the output gradient from the next stage
  // (or the loss), the input gradient to the previous stage.
  void backward(const costmodel::TimelineEvent& e, Live& live, std::vector<detail::WorkPtr>& sends) {
    const std::int64_t c = e.chunk, j = e.microBatch;
    Chunk& chunk = *m_mine.at(c);
    const std::int64_t deferred = e.kind == costmodel::TaskKind::kBackwardInput ? j : -1;
    chunk.deferWeightGradients(deferred);
    forEach([&](detail::ModelState& st) { st.holdGradients(deferred); });
    auto& [input, out] = live.at({c, j});
    if (c == m_chunks - 1) {
      timed(m_libtorch, [&] {
        RECORD_USER_SCOPE(detail::kPhaseBackward);
        torch::autograd::backward({out / static_cast<double>(m_mLocal)});
      });
    } else {
      Tensor grad = boundaryTensor();
      timed(m_libtorch, [&] {
        m_g.pp->recv(grad, static_cast<int>((c + 1) % m_pp), tagOf(c, j, true));
        RECORD_USER_SCOPE(detail::kPhaseBackward);
        torch::autograd::backward({out}, {grad});
      });
    }
    if (c > 0) {
      Tensor send = input.grad().contiguous();
      sends.push_back(timed(m_libtorch, [&] { return m_g.pp->send(send, static_cast<int>((c - 1) % m_pp), tagOf(c - 1, j, true)); }));
    }
    live.erase({c, j});
    chunk.deferWeightGradients(-1);
    forEach([](detail::ModelState& st) { st.holdGradients(-1); });
    timed(m_libtorch, [&] {
      RECORD_USER_SCOPE(detail::kPhaseBackward);
      forEach([](detail::ModelState& st) { st.afterBackward(); });
    });
  }

  const RunOptions& m_o;
  const Plan& m_plan;
  const TokenData& m_data;
  detail::Device& m_device;
  detail::Groups& m_g;
  detail::ModelConfig m_cfg;
  std::map<std::int64_t, std::unique_ptr<Chunk>> m_mine;
  States m_states;
  std::vector<costmodel::TimelineEvent> m_order;
  torch::Dtype m_compute = torch::kFloat32;
  Tensor m_positions;
  std::int64_t m_pp = 1, m_chunks = 1, m_mbs = 1, m_mLocal = 1, m_seq = 1, m_seqLocal = 1;
  double m_libtorch = 0;                            // seconds inside LibTorch calls
  double m_stepStartBytes = 0, m_forwardHeld = 0;  // the allocator's, on a GPU: the last step's (RunResult)
};

// Fault injection for tests: COLO_RUN_FAULT=RANK:STEP[:SIGNAL] sends that rank the signal (default
// SIGKILL; 11: a crash) at the start of that step.
struct Fault {
  int rank = -1, signal = SIGKILL;
  std::int64_t step = -1;
  static Fault fromEnvironment() {
    Fault f;
    if (const char* spec = std::getenv("COLO_RUN_FAULT")) {
      std::sscanf(spec, "%d:%lld:%d", &f.rank, reinterpret_cast<long long*>(&f.step), &f.signal);
    }
    return f;
  }
};

// The median step time (the first step, with its warm-up, left out when there are others).
double medianStepSeconds(const std::vector<double>& stepSeconds) {
  std::vector<double> steady(stepSeconds.begin() + (stepSeconds.size() > 1 ? 1 : 0), stepSeconds.end());
  std::sort(steady.begin(), steady.end());
  return steady[steady.size() / 2];
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
    auto deviceOr = detail::Device::forBackend(o.backend, w.localRank);
    if (!deviceOr) return fail(deviceOr.error());
    detail::Device& device = *deviceOr;
    auto groupsOr = detail::makeGroups(w, plan.parallel, spec.tieWordEmbeddings, o.backend, o.timeoutSeconds, device.device());
    if (!groupsOr) return fail(groupsOr.error());
    detail::Groups& g = *groupsOr;
    const double residentBeforeModel = residentBytes();
    RankRun run(o, *data, device, g);

    std::int64_t firstStep = 0;
    std::string lastCheckpoint;
    if (o.resume) {
      auto resumed = detail::resumeStates(o, spec, run.states(), lastCheckpoint);
      if (!resumed) return fail(resumed.error());
      firstStep = *resumed;
    }
    auto order = stageOrder(plan, run.localMicroBatches(), g.ppRank);
    if (!order) return fail(order.error());
    run.setOrder(std::move(*order));

    RunResult result = describeRun(o, w, firstStep);
    result.device = device.describe();
    result.fusedKernelNames = run.config().fused.usedBy(spec, plan.optimizer).names();
    result.fusedKernels = !result.fusedKernelNames.empty();
    if (auto predicted = predict(plan, o.costDbFile, result); !predicted) return fail(predicted.error());

    const Fault fault = Fault::fromEnvironment();
    detail::StepTrace trace(w.rank == 0 ? o.traceFile : std::string(), device.cuda(), "colo-run");
    const auto runStart = Clock::now();
    for (std::int64_t step = firstStep; step < o.steps; ++step) {
      if (w.rank == fault.rank && step == fault.step) std::raise(fault.signal);
      if (step == std::max(firstStep, o.steps - o.traceSteps)) trace.start();
      const auto stepStart = Clock::now();
      const double lossSum = run.runSchedule(step);
      const double gradNorm = run.reduceGradients();
      run.optimizerStep(step, gradNorm);
      const double stepLoss = run.meanLoss(lossSum);
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
        if (auto wrote = detail::writeCheckpoint(o, plan, g, w.rank, step + 1, run.states(), lastCheckpoint); !wrote) {
          return fail(wrote.error());
        }
      }
    }
    if (const std::string traced = trace.stop(); !traced.empty()) std::cerr << "colo-run: " << traced << "\n";
    result.wallSeconds = since(runStart);
    result.computeSeconds = run.libtorchSeconds();
    result.checkpoint = lastCheckpoint;
    result.stepTimeSeconds = medianStepSeconds(result.stepSeconds);
    result.tokensPerSecond = static_cast<double>(result.tokensPerStep) / result.stepTimeSeconds;
    run.reportMemory(result, residentBeforeModel);
    g.world->barrier();
    return result;
  } catch (const c10::Error& e) {
    return fail(Error::internal(tag + e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return fail(Error::internal(tag + e.what()));
  }
}

}  // namespace colo::executor
