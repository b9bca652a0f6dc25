// One rank of a training job: builds this rank's chunks, runs the plan's pipeline schedule over
// micro-batches, reduces gradients across data-parallel replicas in buckets, clips, steps AdamW (on its
// shard of the flat parameters under ZeRO-1) and checkpoints.
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
#include "comm.h"
#include "model.h"

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

// Where this rank's parameters live in the flat fp32 buffer.
struct Slot {
  Param* param = nullptr;
  std::int64_t offset = 0, numel = 0;
};

std::string stepDir(std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return name;
}

// --- checkpoints: one manifest (JSON) and one blob (fp32 weights, Adam m and v) per model shard ---------

Result<void> writeShard(const std::string& dir, int rank, const Plan& plan, std::int64_t step, const std::vector<Slot>& slots,
                        const Tensor& master, const Tensor& m, const Tensor& v) {
  Json params = Json::array();
  const std::string base = dir + "/rank-" + std::to_string(rank);
  const std::string blobTmp = base + ".bin.tmp";
  {
    std::ofstream out(blobTmp, std::ios::binary | std::ios::trunc);
    if (!out) return fail(Error::io("cannot write", blobTmp));
    std::int64_t at = 0;
    for (const auto& s : slots) {
      for (const Tensor* t : {&master, &m, &v}) {
        Tensor part = t->narrow(0, s.offset, s.numel).to(torch::kCPU, torch::kFloat32).contiguous();
        out.write(reinterpret_cast<const char*>(part.data_ptr<float>()), static_cast<std::streamsize>(s.numel * 4));
      }
      params.push_back({{"name", s.param->name},
                        {"full_shape", s.param->fullShape},
                        {"shard_dim", s.param->shardDim},
                        {"shard_index", s.param->shardIndex},
                        {"shard_count", s.param->shardCount},
                        {"offset", at},
                        {"numel", s.numel}});
      at += 3 * s.numel;
    }
    out.flush();
    if (!out) return fail(Error::io("cannot write", blobTmp));
  }
  std::error_code ec;
  std::filesystem::rename(blobTmp, base + ".bin", ec);
  if (ec) return fail(Error::io("cannot rename: " + ec.message(), base + ".bin"));
  const Json manifest{{"format", "colo.checkpoint-shard/1"}, {"step", step},
                      {"plan_hash", contentHash(planToJson(plan))}, {"model", plan.model.name()},
                      {"params", params}};
  return writeJsonFileAtomic(base + ".json", manifest);
}

// Every shard piece of every parameter in a checkpoint directory.
struct Piece {
  std::string blob;
  std::int64_t offset = 0, numel = 0;
  int shardDim = -1, shardIndex = 0, shardCount = 1;
  std::vector<std::int64_t> fullShape;
};

Result<std::map<std::string, std::vector<Piece>>> readPieces(const std::string& dir, std::int64_t& step, std::string& model) {
  std::map<std::string, std::vector<Piece>> pieces;
  std::error_code ec;
  bool any = false;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string path = entry.path().string();
    if (entry.path().extension() != ".json") continue;
    auto j = readJsonFile(path);
    if (!j) return fail(j.error());
    if (j->value("format", "") != "colo.checkpoint-shard/1") return fail(Error::badInput("not a colo checkpoint shard", path));
    step = (*j)["step"].get<std::int64_t>();
    model = (*j)["model"].get<std::string>();
    const std::string blob = path.substr(0, path.size() - 5) + ".bin";
    for (const auto& p : (*j)["params"]) {
      pieces[p["name"].get<std::string>()].push_back({blob, p["offset"].get<std::int64_t>(), p["numel"].get<std::int64_t>(),
                                                      p["shard_dim"].get<int>(), p["shard_index"].get<int>(),
                                                      p["shard_count"].get<int>(), p["full_shape"].get<std::vector<std::int64_t>>()});
    }
    any = true;
  }
  if (ec) return fail(Error::io("cannot list: " + ec.message(), dir));
  if (!any) return fail(Error::badInput("no checkpoint shards (rank-*.json)", dir));
  return pieces;
}

// Reads (weights, m, v) of the full tensor `name` from its pieces, whatever tensor-parallel split they
// were saved under, and returns this rank's shard of each.
Result<std::array<Tensor, 3>> loadParam(const Param& prm, const std::vector<Piece>& all, const std::string& dir) {
  // Pieces of one complete split (the first split seen; a tied copy may repeat pieces).
  std::map<int, const Piece*> byIndex;
  const int count = all.front().shardCount;
  for (const auto& p : all) {
    if (p.shardCount == count) byIndex.emplace(p.shardIndex, &p);
  }
  if (static_cast<int>(byIndex.size()) != count) {
    return fail(Error::badInput("checkpoint lacks shards of " + prm.name + " (" + std::to_string(byIndex.size()) + " of " +
                                    std::to_string(count) + ")",
                                dir));
  }
  if (all.front().fullShape != prm.fullShape) {
    return fail(Error::badInput("checkpoint shape of " + prm.name + " differs from the model's (another model?)", dir));
  }
  std::array<std::vector<Tensor>, 3> parts;
  std::vector<std::int64_t> shape = prm.fullShape;
  const int dim = all.front().shardDim;
  if (dim >= 0) shape[static_cast<std::size_t>(dim)] /= count;
  for (const auto& [index, piece] : byIndex) {
    std::ifstream in(piece->blob, std::ios::binary);
    if (!in) return fail(Error::io("cannot read", piece->blob));
    in.seekg(piece->offset * 4);
    for (int k = 0; k < 3; ++k) {
      Tensor t = torch::empty({piece->numel}, torch::kFloat32);
      in.read(reinterpret_cast<char*>(t.data_ptr<float>()), static_cast<std::streamsize>(piece->numel * 4));
      if (!in) return fail(Error::badInput("truncated checkpoint blob", piece->blob));
      parts[static_cast<std::size_t>(k)].push_back(t.view(shape));
    }
  }
  std::array<Tensor, 3> out;
  for (int k = 0; k < 3; ++k) {
    Tensor full = dim >= 0 ? torch::cat(parts[static_cast<std::size_t>(k)], dim) : parts[static_cast<std::size_t>(k)][0];
    if (prm.shardDim >= 0) {
      const std::int64_t part = prm.fullShape[static_cast<std::size_t>(prm.shardDim)] / prm.shardCount;
      full = full.narrow(prm.shardDim, prm.shardIndex * part, part);
    }
    out[static_cast<std::size_t>(k)] = full.contiguous().view({-1});
  }
  return out;
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
  }
  result.predictionSource = db ? "cost database " + costDbFile + " (measured kernels and collectives)"
                               : "the analytic model of cluster " + plan.cluster.name +
                                     " (no measured cost database: colo-profile one and pass --costdb)";
  return {};
}

}  // namespace

Result<std::string> latestCheckpoint(const std::string& checkpointDir) {
  if (checkpointDir.empty()) return fail(Error::badInput("--resume needs --checkpoint-dir"));
  std::ifstream latestFile(checkpointDir + "/latest");
  std::string latest;
  if (!(latestFile >> latest)) {
    return fail(Error::badInput("no checkpoint to resume from: no 'latest' file; an earlier run with --checkpoint-dir " +
                                    checkpointDir + " writes one",
                                checkpointDir));
  }
  return checkpointDir + "/" + latest;
}

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
    auto groupsOr = detail::makeGroups(w, par, tied, o.backend, o.timeoutSeconds);
    if (!groupsOr) return fail(groupsOr.error());
    detail::Groups& g = *groupsOr;
    const double residentBeforeModel = residentBytes();

    // This rank's chunks: chunk c runs on stage c % pp; its layers follow the plan's stages.
    const std::int64_t pp = par.pp, v = par.virtualStages, chunks = pp * v;
    std::vector<std::int64_t> firstLayer(static_cast<std::size_t>(chunks) + 1, 0);
    for (std::int64_t c = 0; c < chunks; ++c) {
      firstLayer[static_cast<std::size_t>(c) + 1] = firstLayer[static_cast<std::size_t>(c)] + plan.stages[static_cast<std::size_t>(c)].layers;
    }
    detail::ModelConfig cfg;
    cfg.spec = spec;
    cfg.seqLen = plan.seqLen;
    cfg.paddedVocab = detail::paddedVocabulary(spec.vocabSize, static_cast<int>(par.tp));
    cfg.tp = static_cast<int>(par.tp);
    cfg.tpRank = g.tpRank;
    cfg.sequenceParallel = par.sequenceParallel;
    cfg.tpComm = g.tp.get();
    cfg.seed = o.seed;
    std::map<std::int64_t, std::unique_ptr<Chunk>> mine;  // chunk id -> chunk
    for (std::int64_t c = g.ppRank; c < chunks; c += pp) {
      mine[c] = std::make_unique<Chunk>(cfg, firstLayer[static_cast<std::size_t>(c)], plan.stages[static_cast<std::size_t>(c)].layers,
                                        c == 0, c == chunks - 1, plan.stages[static_cast<std::size_t>(c)]);
    }

    // One flat fp32 buffer holds every parameter (padded to a multiple of dp for ZeRO-1's shards); the
    // parameters become views of it, so the optimizer updates them in place.
    std::vector<Slot> slots;
    std::int64_t total = 0;
    for (auto& [c, chunk] : mine) {
      for (auto& prm : chunk->params()) {
        slots.push_back({&prm, total, prm.tensor.numel()});
        total += prm.tensor.numel();
      }
    }
    const std::int64_t dp = par.dp;
    const std::int64_t padded = (total + dp - 1) / dp * dp;
    Tensor master = torch::zeros({padded}, torch::kFloat32);
    for (auto& s : slots) master.narrow(0, s.offset, s.numel).copy_(s.param->tensor.detach().view({-1}));
    // bf16 mixed precision: the model computes with a bf16 copy of the weights (views of one bf16 buffer)
    // whose gradients land in a bf16 buffer, added after every backward into the fp32 gradients the
    // reductions and the optimizer use (Megatron's main_grad); the fp32 master weights are what is updated.
    const bool mixed = plan.precision == DType::kBf16;
    const torch::Dtype compute = mixed ? torch::kBFloat16 : torch::kFloat32;
    Tensor weights = mixed ? master.to(torch::kBFloat16) : master;
    Tensor grads = torch::zeros({padded}, torch::kFloat32);
    Tensor gradsCompute = mixed ? torch::zeros({padded}, torch::kBFloat16) : grads;
    for (auto& s : slots) {
      const auto shape = s.param->tensor.sizes().vec();
      s.param->tensor = weights.narrow(0, s.offset, s.numel).view(shape).detach().requires_grad_(true);
      // Gradients accumulate straight into the flat buffer too (each .grad a view of it): no copy before
      // the reductions, no allocation per step.
      s.param->tensor.mutable_grad() = gradsCompute.narrow(0, s.offset, s.numel).view(shape);
    }
    Tensor denominator;
    const bool zero1 = plan.zeroStage >= 1 && dp > 1;
    const std::int64_t shard = zero1 ? padded / dp : padded;
    const std::int64_t lo = zero1 ? g.dpRank * shard : 0;
    Tensor adamM = torch::zeros({shard}, torch::kFloat32), adamV = torch::zeros({shard}, torch::kFloat32);

    // Resume: weights and Adam moments of every parameter, re-sharded from whatever plan wrote them.
    std::int64_t firstStep = 0;
    std::string lastCheckpoint;
    if (o.resume) {
      auto newest = latestCheckpoint(o.checkpointDir);
      if (!newest) return fail(newest.error());
      const std::string dir = *newest;
      std::int64_t savedStep = 0;
      std::string savedModel;
      auto pieces = readPieces(dir, savedStep, savedModel);
      if (!pieces) return fail(pieces.error());
      if (savedModel != spec.name) {
        return fail(Error::badInput("checkpoint of model " + savedModel + ", the plan trains " + spec.name, dir));
      }
      Tensor fullM = torch::zeros({padded}, torch::kFloat32), fullV = torch::zeros({padded}, torch::kFloat32);
      for (auto& s : slots) {
        auto it = pieces->find(s.param->name);
        if (it == pieces->end()) return fail(Error::badInput("checkpoint has no parameter " + s.param->name, dir));
        auto loaded = loadParam(*s.param, it->second, dir);
        if (!loaded) return fail(loaded.error());
        torch::NoGradGuard noGrad;
        master.narrow(0, s.offset, s.numel).copy_((*loaded)[0]);
        fullM.narrow(0, s.offset, s.numel).copy_((*loaded)[1]);
        fullV.narrow(0, s.offset, s.numel).copy_((*loaded)[2]);
      }
      if (mixed) weights.copy_(master);
      adamM.copy_(fullM.narrow(0, lo, shard));
      adamV.copy_(fullV.narrow(0, lo, shard));
      firstStep = savedStep;
      lastCheckpoint = dir;
      if (firstStep >= o.steps) {
        return fail(Error::badInput("the checkpoint is at step " + std::to_string(firstStep) + ", --steps is " +
                                    std::to_string(o.steps) + ": nothing left to run"));
      }
    }

    // The plan's schedule for this stage: the simulator's order of forwards and backwards.
    const std::int64_t mbs = plan.microBatchSize;
    const std::int64_t mLocal = plan.globalBatchSize / (mbs * dp);
    costmodel::ScheduleInput schedule;
    schedule.schedule = plan.schedule;
    schedule.pp = pp;
    schedule.virtualStages = v;
    schedule.microBatches = mLocal;
    schedule.forwardSeconds.assign(static_cast<std::size_t>(chunks), 1.0);
    schedule.backwardSeconds.assign(static_cast<std::size_t>(chunks), 2.0);
    auto timeline = costmodel::simulateSchedule(schedule);
    if (!timeline) return fail(timeline.error());
    std::vector<costmodel::TimelineEvent> order;
    for (const auto& e : timeline->events) {
      if (e.stage == g.ppRank) order.push_back(e);
    }
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.startSeconds < b.startSeconds; });

    // Predictions to compare with.
    RunResult result;
    result.planName = plan.name.empty() ? std::filesystem::path(o.planFile).stem().string() : plan.name;
    result.planHash = contentHash(planToJson(plan));
    result.model = spec.name;
    result.device = o.backend == "gloo" ? "cpu" : "cuda";
    result.backend = o.backend;
    result.world = w.world;
    result.tp = par.tp;
    result.pp = pp;
    result.dp = dp;
    result.vpp = v;
    result.firstStep = firstStep;
    result.tokensPerStep = plan.globalBatchSize * plan.seqLen;
    auto predicted = predict(plan, o.costDbFile, result);
    if (!predicted) return fail(predicted.error());

    // Fault injection for tests: COLO_RUN_FAULT=RANK:STEP kills that rank at the start of that step.
    int faultRank = -1;
    std::int64_t faultStep = -1;
    if (const char* f = std::getenv("COLO_RUN_FAULT")) std::sscanf(f, "%d:%lld", &faultRank, reinterpret_cast<long long*>(&faultStep));

    const std::int64_t seq = plan.seqLen;
    const bool sp = par.sequenceParallel && par.tp > 1;
    const std::int64_t seqLocal = sp ? seq / par.tp : seq;
    const std::int64_t hidden = spec.hiddenSize;
    double libtorch = 0;
    const auto runStart = Clock::now();
    for (std::int64_t step = firstStep; step < o.steps; ++step) {
      if (w.rank == faultRank && step == faultStep) std::raise(SIGKILL);
      const auto stepStart = Clock::now();
      grads.zero_();
      if (mixed) gradsCompute.zero_();
      // Inputs and labels of this rank's micro-batch j: global samples dpRank * mLocal * mbs + j * mbs + i.
      auto tokens = [&](std::int64_t j) {
        std::vector<std::int64_t> flat;
        for (std::int64_t i = 0; i < mbs; ++i) {
          auto sample = data->sample(o.seed, step, g.dpRank * mLocal * mbs + j * mbs + i, seq);
          flat.insert(flat.end(), sample.begin(), sample.end());
        }
        return torch::tensor(flat, torch::kInt64).view({mbs, seq + 1});
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
            input = t.narrow(1, 0, seq);
            labels = t.narrow(1, 1, seq);
          }
          if (c > 0) {
            input = torch::empty({mbs, seqLocal, hidden}, compute);
            timed(libtorch, [&] { g.pp->recv(input, static_cast<int>((c - 1) % pp), tagOf(c - 1, j, false)); });
            input.requires_grad_(true);
          }
          Tensor out = timed(libtorch, [&] { return chunk.forward(input, labels, {step, j}); });
          if (c == chunks - 1) {
            lossSum += out.item<double>();
          } else {
            Tensor send = out.detach().contiguous();
            sends.push_back(timed(libtorch, [&] { return g.pp->send(send, static_cast<int>((c + 1) % pp), tagOf(c, j, false)); }));
          }
          live[{c, j}] = {input, out};
        } else {
          auto& [input, out] = live.at({c, j});
          if (c == chunks - 1) {
            timed(libtorch, [&] { torch::autograd::backward({out / static_cast<double>(mLocal)}); });
          } else {
            Tensor grad = torch::empty({mbs, seqLocal, hidden}, compute);
            timed(libtorch, [&] {
              g.pp->recv(grad, static_cast<int>((c + 1) % pp), tagOf(c, j, true));
              torch::autograd::backward({out}, {grad});
            });
          }
          if (c > 0) {
            Tensor send = input.grad().contiguous();
            sends.push_back(timed(libtorch, [&] { return g.pp->send(send, static_cast<int>((c - 1) % pp), tagOf(c - 1, j, true)); }));
          }
          live.erase({c, j});
          if (mixed) {
            timed(libtorch, [&] {
              torch::NoGradGuard noGrad;
              grads.add_(gradsCompute);
              gradsCompute.zero_();
            });
          }
        }
      }
      for (auto& s : sends) timed(libtorch, [&] { s->wait(); });
      for (auto& [c, chunk] : mine) chunk->endStep();

      // The reductions the layout needs, on the flat gradient buffer.
      double sumSquares = 0;
      timed(libtorch, [&] {
        torch::NoGradGuard noGrad;
        for (auto& s : slots) {
          if (s.param->tensor.grad().data_ptr() != gradsCompute.narrow(0, s.offset, s.numel).data_ptr()) {
            throw std::logic_error("gradient of " + s.param->name + " left the flat buffer");
          }
        }
        for (auto& s : slots) {
          Tensor slice = grads.narrow(0, s.offset, s.numel);
          // Tied embedding: the first and last stage sum their copies' gradients.
          if (s.param->name == "embedding.word" && tied && pp > 1) g.embedding->allReduce(slice);
          // Sequence parallelism: norms and biases saw only this rank's part of the sequence.
          if (s.param->spPartial) g.tp->allReduce(slice);
        }
        // Data parallelism: bucketed all-reduce, averaged.
        if (dp > 1) {
          const std::int64_t bucket = std::max<std::int64_t>(1, o.bucketBytes / 4);
          std::vector<detail::WorkPtr> works;
          std::vector<Tensor> buckets;
          for (std::int64_t at = 0; at < padded; at += bucket) {
            buckets.push_back(grads.narrow(0, at, std::min(bucket, padded - at)));
            works.push_back(g.dp->allReduceAsync(buckets.back()));
          }
          for (auto& work : works) work->wait();
          grads.div_(static_cast<double>(dp));
        }
        // Global gradient norm: every parameter once (tensor-parallel replicas and the tied copy once).
        Tensor local = torch::zeros({1}, torch::kFloat64);
        for (auto& s : slots) {
          if (s.param->tiedCopy || (s.param->tpReplicated && g.tpRank != 0)) continue;
          local += grads.narrow(0, s.offset, s.numel).to(torch::kFloat64).pow(2).sum();
        }
        g.world->allReduce(local);
        sumSquares = local.item<double>() / static_cast<double>(dp);
      });
      const double gradNorm = std::sqrt(sumSquares);
      const double clip = o.clipNorm > 0 ? std::min(1.0, o.clipNorm / (gradNorm + 1e-6)) : 1.0;

      // Learning rate: linear warm-up, then cosine decay to the minimum at the last step.
      double lr = o.learningRate;
      if (step < o.warmupSteps) {
        lr = o.learningRate * static_cast<double>(step + 1) / static_cast<double>(o.warmupSteps);
      } else {
        const double progress = o.steps > o.warmupSteps
                                    ? static_cast<double>(step - o.warmupSteps) / static_cast<double>(o.steps - o.warmupSteps)
                                    : 1.0;
        lr = o.minLearningRate + 0.5 * (o.learningRate - o.minLearningRate) * (1.0 + std::cos(M_PI * progress));
      }
      timed(libtorch, [&] {
        torch::NoGradGuard noGrad;
        const double t = static_cast<double>(step + 1);
        Tensor gs = grads.narrow(0, lo, shard);
        if (clip < 1.0) gs.mul_(clip);
        Tensor ps = master.narrow(0, lo, shard);
        adamM.mul_(o.beta1).add_(gs, 1.0 - o.beta1);
        adamV.mul_(o.beta2).addcmul_(gs, gs, 1.0 - o.beta2);
        const double c1 = 1.0 - std::pow(o.beta1, t), c2 = 1.0 - std::pow(o.beta2, t);
        ps.mul_(1.0 - lr * o.weightDecay);
        if (!denominator.defined()) denominator = torch::empty_like(adamV);
        torch::div_out(denominator, adamV, c2).sqrt_().add_(o.epsilon);
        ps.addcdiv_(adamM, denominator, -lr / c1);
        if (zero1) {
          Tensor gathered = g.dp->allGather(ps.clone(), 0);
          master.copy_(gathered);
        }
        if (mixed) weights.copy_(master);
      });

      // The step's loss over all micro-batches of all replicas (the last stage's first tp rank has it).
      Tensor loss = torch::zeros({1}, torch::kFloat64);
      if (mine.contains(chunks - 1) && g.tpRank == 0) loss += lossSum;
      timed(libtorch, [&] { g.world->allReduce(loss); });
      const double stepLoss = loss.item<double>() / static_cast<double>(mLocal * dp);
      const double seconds = since(stepStart);
      result.losses.push_back(stepLoss);
      result.stepSeconds.push_back(seconds);
      result.gradNorms.push_back(gradNorm);
      if (w.rank == 0 && o.progress) {
        std::cerr << "step " << step + 1 << "/" << o.steps << "  loss " << formatFixed(stepLoss, 4) << "  grad norm "
                  << formatFixed(gradNorm, 3) << "  " << formatFixed(seconds * 1e3, 1) << " ms  "
                  << formatFixed(static_cast<double>(result.tokensPerStep) / seconds, 0) << " tokens/s\n";
      }

      // Checkpoint: each model shard once (data-parallel rank 0), then `latest` once every shard is down.
      const bool due = !o.checkpointDir.empty() &&
                       ((o.checkpointEvery > 0 && (step + 1) % o.checkpointEvery == 0) || step + 1 == o.steps);
      if (due) {
        const std::string dir = o.checkpointDir + "/" + stepDir(step + 1);
        Tensor fullM = zero1 ? g.dp->allGather(adamM, 0) : adamM;
        Tensor fullV = zero1 ? g.dp->allGather(adamV, 0) : adamV;
        if (g.dpRank == 0) {
          std::error_code ec;
          std::filesystem::create_directories(dir, ec);
          if (ec) return fail(Error::io("cannot create: " + ec.message(), dir));
          if (auto wrote = writeShard(dir, w.rank, plan, step + 1, slots, master, fullM, fullV); !wrote) return fail(wrote.error());
        }
        g.world->barrier();
        if (w.rank == 0) {
          const std::string tmp = o.checkpointDir + "/latest.tmp";
          {
            std::ofstream latest(tmp, std::ios::trunc);
            latest << stepDir(step + 1) << "\n";
          }
          std::error_code ec;
          std::filesystem::rename(tmp, o.checkpointDir + "/latest", ec);
          if (ec) return fail(Error::io("cannot rename: " + ec.message(), o.checkpointDir + "/latest"));
        }
        g.world->barrier();
        lastCheckpoint = dir;
      }
    }
    result.wallSeconds = since(runStart);
    result.computeSeconds = libtorch;
    result.checkpoint = lastCheckpoint;
    std::vector<double> steady(result.stepSeconds.begin() + (result.stepSeconds.size() > 1 ? 1 : 0), result.stepSeconds.end());
    std::sort(steady.begin(), steady.end());
    result.stepTimeSeconds = steady[steady.size() / 2];
    result.tokensPerSecond = static_cast<double>(result.tokensPerStep) / result.stepTimeSeconds;
    const double peakResident = peakResidentBytes();
    Tensor peak = torch::tensor({peakResident, peakResident - residentBeforeModel}, torch::kFloat64);
    g.world->allReduce(peak, c10d::ReduceOp::MAX);
    result.peakMemoryBytes = peak[0].item<double>();
    result.tensorMemoryBytes = peak[1].item<double>();
    g.world->barrier();
    return result;
  } catch (const c10::Error& e) {
    return fail(Error::internal(tag + e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return fail(Error::internal(tag + e.what()));
  }
}

}  // namespace colo::executor
