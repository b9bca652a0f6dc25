// A rank's model states under its ZeRO stage: the flat layout, the reductions before the optimizer
// step, the step, and checkpoints (the per-unit gathers and reduce-scatters are in state_units.cpp).
#include "state.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <thread>

#include "colo/kernels/torch_ops.h"
#include "state_units.h"

namespace colo::executor::detail {

using torch::Tensor;

ModelState::ModelState(const std::vector<Chunk*>& chunks, const Config& config, Groups& groups) : m_cfg(config), m_g(groups) {
  m_group = experts() ? m_g.expertDp.get() : m_g.dpCp.get();
  if (m_cfg.average <= 0) m_cfg.average = static_cast<double>(m_cfg.dp);
  if (m_cfg.dp <= 1) m_cfg.zeroStage = 0;
  const int stage = m_cfg.zeroStage;
  const auto dp = m_cfg.dp;
  m_compute = m_cfg.mixed ? torch::kBFloat16 : torch::kFloat32;
  m_ways = stage >= 1 ? static_cast<int>(dp) : 1;
  m_way = stage >= 1 ? m_group->rank() : 0;
  const bool perUnit = stage >= 2;

  // Layout: chunk by chunk, unit by unit; with ZeRO-2/3 each unit padded to a multiple of dp.
  for (Chunk* chunk : chunks) {
    std::vector<int> map(static_cast<std::size_t>(chunk->units()), -1);
    for (int cu = 0; cu < chunk->units(); ++cu) {
      auto unit = std::make_unique<Unit>();
      unit->offset = m_flat;
      for (auto& prm : chunk->params()) {
        if (prm.unit != cu || (m_cfg.params != Config::Params::kAll && prm.expert != experts())) continue;
        unit->slots.push_back(m_slots.size());
        m_slots.push_back({&prm, m_flat, prm.tensor.numel(), prm.tensor.sizes().vec()});
        m_flat += prm.tensor.numel();
      }
      if (unit->slots.empty()) continue;
      if (perUnit) m_flat = (m_flat + dp - 1) / dp * dp;
      unit->numel = m_flat - unit->offset;
      map[static_cast<std::size_t>(cu)] = static_cast<int>(m_units.size());
      m_units.push_back(std::move(unit));
    }
    if (perUnit) m_hooks.push_back(std::make_unique<Hooks>(this, std::move(map)));
  }
  m_flat = (m_flat + dp - 1) / dp * dp;
  if (perUnit) {
    for (auto& u : m_units) {
      u->shardOffset = m_shard;
      m_shard += u->numel / dp;
      m_ranges.emplace_back(u->offset, u->numel);
    }
  } else {
    m_ranges.emplace_back(0, m_flat);
    m_shard = m_flat / m_ways;
  }

  Tensor full = torch::zeros({m_flat}, torch::kFloat32);
  for (auto& s : m_slots) full.narrow(0, s.offset, s.numel).copy_(s.param->tensor.detach().reshape({-1}));
  if (stage <= 2) m_weights = full.to(m_cfg.device, m_compute);
  const Tensor shard = stage == 0 ? full : toShard(full);
  m_hostLen = static_cast<std::int64_t>(std::floor(std::clamp(m_cfg.offloadFraction, 0.0, 1.0) * static_cast<double>(m_shard)));
  const std::int64_t onDevice = m_shard - m_hostLen;
  if (!m_cfg.mixed && stage <= 1) {
    // fp32 weights are their own master: this rank's part of them (stage 1 splits them contiguously).
    m_master = m_weights.narrow(0, m_way * m_shard + m_hostLen, onDevice);
  } else {
    m_master = shard.narrow(0, m_hostLen, onDevice).to(m_cfg.device).clone();
  }
  m_m = torch::zeros({onDevice}, m_master.options());
  m_v = torch::zeros({onDevice}, m_master.options());
  if (m_hostLen > 0) {
    const auto host = torch::TensorOptions().dtype(torch::kFloat32).device(torch::kCPU).pinned_memory(m_cfg.device.is_cuda());
    m_hostMaster = torch::empty({m_hostLen}, host).copy_(shard.narrow(0, 0, m_hostLen));
    m_hostM = torch::zeros({m_hostLen}, host);
    m_hostV = torch::zeros({m_hostLen}, host);
    m_hostBytes = 3.0 * static_cast<double>(m_hostLen) * 4.0;
    if (stage == 3) m_hostOnDevice = m_hostMaster.to(m_cfg.device, m_compute);
  }
  if (stage <= 1) {
    m_grads = torch::zeros({m_flat}, m_master.options());
    m_gradsCompute = m_cfg.mixed ? torch::zeros({m_flat}, m_weights.options()) : m_grads;
    for (auto& s : m_slots) {
      // Each parameter a leaf over the weights, its gradient accumulating straight into the flat buffer.
      s.param->tensor = m_weights.narrow(0, s.offset, s.numel).view(s.shape).detach().requires_grad_(true);
      s.param->tensor.mutable_grad() = m_gradsCompute.narrow(0, s.offset, s.numel).view(s.shape);
    }
  } else {
    m_gradShard = torch::zeros({m_shard}, m_master.options());
    // The norm counts each parameter once; sequence-parallel partial gradients sum over tp.
    Tensor count = torch::zeros({m_flat}, torch::kFloat32), sp = torch::zeros({m_flat}, torch::kFloat32);
    for (auto& s : m_slots) {
      const bool counted = !s.param->tiedCopy && !(s.param->tpReplicated && m_g.tpRank != 0);
      count.narrow(0, s.offset, s.numel).fill_(counted ? 1.0 : 0.0);
      sp.narrow(0, s.offset, s.numel).fill_(s.param->spPartial ? 1.0 : 0.0);
    }
    m_countMask = toShard(count).to(m_cfg.device);
    m_spMask = toShard(sp).to(m_cfg.device);
    const auto opts = torch::TensorOptions().dtype(m_compute).device(m_cfg.device);
    for (auto& u : m_units) {
      u->anchor = torch::zeros({1}, torch::kFloat32).requires_grad_(true);
      if (stage == 3) {
        u->storage = torch::empty({u->numel}, opts);
        releaseStorage(u->storage);
      }
    }
    for (auto& s : m_slots) s.param->tensor = Tensor();  // bound per unit from now on
    std::size_t next = 0;
    for (Chunk* chunk : chunks) {
      UnitHooks* hooks = m_hooks[next++].get();
      if (m_cfg.params != Config::Params::kExperts) chunk->setHooks(hooks, false);
      if (m_cfg.params != Config::Params::kDense) chunk->setHooks(hooks, true);
    }
  }
  for (const Tensor* t : {&m_weights, &m_m, &m_v, &m_grads, &m_gradShard, &m_hostOnDevice}) m_persistentBytes += bytesOf(*t);
  if (!m_weights.defined() || !m_master.is_alias_of(m_weights)) m_persistentBytes += bytesOf(m_master);
  if (m_gradsCompute.defined() && !m_gradsCompute.is_same(m_grads)) m_persistentBytes += bytesOf(m_gradsCompute);
}

Tensor ModelState::toShard(const Tensor& full) const {
  std::vector<Tensor> parts;
  for (const auto& [offset, numel] : m_ranges) {
    const std::int64_t part = numel / m_ways;
    parts.push_back(full.narrow(0, offset + m_way * part, part));
  }
  return parts.size() == 1 ? parts[0] : torch::cat(parts);
}

Tensor ModelState::fromShards(const Tensor& shard) const {
  if (m_ways == 1) return shard;
  Tensor all = m_group->allGather(shard.contiguous(), 0);  // [ways * shard], rank after rank
  if (m_ranges.size() == 1) return all;
  Tensor full = torch::zeros({m_flat}, shard.options());
  std::int64_t at = 0;
  for (const auto& [offset, numel] : m_ranges) {
    const std::int64_t part = numel / m_ways;
    for (int r = 0; r < m_ways; ++r) full.narrow(0, offset + r * part, part).copy_(all.narrow(0, r * m_shard + at, part));
    at += part;
  }
  return full;
}

void ModelState::transient(double bytes) {
  m_transient += bytes;
  m_peakTransient = std::max(m_peakTransient, m_transient);
}

Tensor ModelState::masterSlice(std::int64_t offset, std::int64_t length) {
  if (m_hostLen == 0) return m_master.narrow(0, offset, length);
  std::vector<Tensor> parts;
  const std::int64_t end = offset + length;
  if (offset < m_hostLen) parts.push_back(m_hostOnDevice.narrow(0, offset, std::min(end, m_hostLen) - offset).to(torch::kFloat32));
  if (end > m_hostLen) {
    const std::int64_t from = std::max(offset, m_hostLen);
    parts.push_back(m_master.narrow(0, from - m_hostLen, end - from));
  }
  return parts.size() == 1 ? parts[0] : torch::cat(parts);
}

Tensor ModelState::joined(const Tensor& host, const Tensor& device) {
  if (m_hostLen == 0) return device;
  const auto start = std::chrono::steady_clock::now();
  Tensor out = torch::cat({host.to(device.device()), device});
  m_copySeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

void ModelState::beginStep() {
  torch::NoGradGuard noGrad;
  if (m_grads.defined()) m_grads.zero_();
  if (m_gradsCompute.defined() && !m_gradsCompute.is_same(m_grads)) m_gradsCompute.zero_();
  if (m_gradShard.defined()) m_gradShard.zero_();
}

void ModelState::afterBackward() {
  if (!m_cfg.mixed || m_cfg.zeroStage >= 2) return;
  torch::NoGradGuard noGrad;
  m_grads.add_(m_gradsCompute);
  m_gradsCompute.zero_();
}

namespace {

// Adds the sum of squares of `x` into `local` (one fp64 element on x's device): colo's kernel (one read
// of x, fp64 accumulation), or LibTorch's operators on fp64 copies in pieces of at most 8M elements (a
// 64 MiB temporary; 36 bytes moved per element against the kernel's 4).
void addSquares(const Tensor& x, Tensor& local, bool fused) {
  if (fused) {
    kernels::torch_ops::addSumOfSquares(x, local);
    return;
  }
  constexpr std::int64_t kPiece = std::int64_t{1} << 23;
  const Tensor flat = x.reshape({-1});
  for (std::int64_t at = 0; at < flat.numel(); at += kPiece) {
    Tensor piece = flat.narrow(0, at, std::min(kPiece, flat.numel() - at)).to(torch::kFloat64);
    local += piece.mul_(piece).sum();
  }
}

}  // namespace

double ModelState::reduceGradients(std::int64_t bucketBytes, bool tiedAcrossStages, bool fusedNorm) {
  torch::NoGradGuard noGrad;
  drain();
  for (auto& s : m_slots) {
    if (m_cfg.zeroStage <= 1 && s.param->tensor.grad().data_ptr() != m_gradsCompute.narrow(0, s.offset, s.numel).data_ptr()) {
      throw std::logic_error("gradient of " + s.param->name + " left the flat buffer");
    }
  }
  const auto replicas = static_cast<double>(m_cfg.dp);
  Tensor local = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64).device(m_master.device()));
  if (m_cfg.zeroStage <= 1) {
    for (auto& s : m_slots) {
      Tensor slice = m_grads.narrow(0, s.offset, s.numel);
      // Tied embedding: the first and last stage sum their copies' gradients.
      if (s.param->name == "embedding.word" && tiedAcrossStages) m_g.embedding->allReduce(slice);
      // Sequence parallelism: norms and biases saw only this rank's part of the sequence.
      if (s.param->spPartial) m_g.tp->allReduce(slice);
    }
    if (m_cfg.dp > 1) {
      const std::int64_t bucket = std::max<std::int64_t>(1, bucketBytes / 4);
      std::vector<WorkPtr> works;
      std::vector<Tensor> buckets;
      for (std::int64_t at = 0; at < m_flat; at += bucket) {
        buckets.push_back(m_grads.narrow(0, at, std::min(bucket, m_flat - at)));
        works.push_back(m_group->allReduceAsync(buckets.back()));
      }
      for (auto& work : works) work->wait();
    }
    if (m_cfg.dp > 1 || m_cfg.average != replicas) m_grads.div_(m_cfg.average);
    // Every parameter once (tensor-parallel replicas and the tied copy once); every replica counts it.
    // Summed over runs of adjacent counted parameters (with colo's kernel: two kernels a run; LibTorch's
    // fp64 copies took 15 ms a step of a 1.3B GPT on an H200, the kernel 1.2 ms).
    auto addRun = [&](std::int64_t offset, std::int64_t length) { addSquares(m_grads.narrow(0, offset, length), local, fusedNorm); };
    std::int64_t runStart = 0, runLength = 0;
    for (auto& s : m_slots) {
      if (s.param->tiedCopy || (s.param->tpReplicated && m_g.tpRank != 0)) continue;
      if (runLength > 0 && s.offset == runStart + runLength) {
        runLength += s.numel;
        continue;
      }
      if (runLength > 0) addRun(runStart, runLength);
      runStart = s.offset;
      runLength = s.numel;
    }
    if (runLength > 0) addRun(runStart, runLength);
    return local.item<double>() / replicas;
  }
  // ZeRO-2/3: the shards hold sums over dp of this rank's part of every unit.
  m_gradShard.div_(m_cfg.average);
  if (tiedAcrossStages) {
    for (auto& u : m_units) {
      if (m_slots[u->slots.front()].param->name != "embedding.word") continue;
      Tensor part = m_gradShard.narrow(0, u->shardOffset, u->numel / m_ways);
      m_g.embedding->allReduce(part);
    }
  }
  if (m_g.tp->size() > 1) {
    Tensor partial = m_gradShard * m_spMask;
    m_g.tp->allReduce(partial);
    m_gradShard.mul_(1.0 - m_spMask).add_(partial);
  }
  addSquares(m_gradShard * m_countMask, local, fusedNorm);
  return local.item<double>();
}

void ModelState::step(const OptimizerSettings& o) {
  torch::NoGradGuard noGrad;
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  Tensor gs = m_cfg.zeroStage >= 2 ? m_gradShard : m_grads.narrow(0, m_way * m_shard, m_shard);
  // Norms of whole parameters (LAMB, LARS) need the shard in one piece: the capability list keeps
  // offload to AdamW.
  const auto norms = [this](const Tensor& x) { return parameterNorms(x); };
  std::thread host;
  if (m_hostLen > 0) {
    // ZeRO-Offload: the offloaded part's gradients out, its step on the host, on a thread of its own
    // while the device steps its part (the two touch disjoint elements; offload is AdamW only, whose
    // step is elementwise and calls no collective).
    if (o.kind != Optimizer::kAdamW) throw std::logic_error("offload with an optimizer whose norms span host and device");
    const auto t = Clock::now();
    Tensor hostGrads = gs.narrow(0, 0, m_hostLen).to(torch::kCPU);
    m_copySeconds += since(t);
    host = std::thread([this, &o, grads = std::move(hostGrads)] {
      torch::NoGradGuard hostNoGrad;
      const auto start = Clock::now();
      optimizerStep(o, m_hostMaster, grads, m_hostM, m_hostV, {});
      m_hostStepSeconds += std::chrono::duration<double>(Clock::now() - start).count();
    });
  }
  try {
    optimizerStep(o, m_master, gs.narrow(0, m_hostLen, m_shard - m_hostLen), m_m, m_v, norms);
  } catch (...) {
    if (host.joinable()) host.join();
    throw;
  }
  if (host.joinable()) host.join();
  // The weights the next forward reads, the offloaded part's coming back from the host.
  switch (m_cfg.zeroStage) {
    case 0:
      if (m_cfg.mixed || m_hostLen > 0) m_weights.narrow(0, 0, m_shard).copy_(joined(m_hostMaster, m_master));
      break;
    case 1:
    case 2: {
      Tensor shard = joined(m_hostMaster, m_master);
      if (shard.is_alias_of(m_weights)) shard = shard.clone();
      m_weights.copy_(fromShards(shard));
      break;
    }
    default:  // ZeRO-3: the next forward gathers the updated shards
      if (m_hostLen > 0) {
        const auto t = Clock::now();
        m_hostOnDevice.copy_(m_hostMaster);
        m_copySeconds += since(t);
      }
      break;
  }
}

Tensor ModelState::parameterNorms(const Tensor& values) {
  const auto slots = static_cast<std::int64_t>(m_slots.size());
  if (!m_segments.defined()) {
    Tensor seg = torch::full({m_flat}, slots, torch::kInt64);
    Tensor split = torch::zeros({slots + 1}, torch::kFloat64);
    for (std::int64_t i = 0; i < slots; ++i) {
      const Slot& s = m_slots[static_cast<std::size_t>(i)];
      seg.narrow(0, s.offset, s.numel).fill_(i);
      split[i] = s.param->tpReplicated ? 0.0 : 1.0;  // replicated: every tp rank holds all of it
    }
    m_segments = toShard(seg).contiguous().to(values.device());
    m_tpSummed = split.to(values.device());
  }
  Tensor sums = torch::zeros({slots + 1}, values.options().dtype(torch::kFloat64));
  sums.index_add_(0, m_segments, values.to(torch::kFloat64).pow(2));
  if (m_ways > 1) m_group->allReduce(sums);
  Tensor parts = sums * m_tpSummed;
  m_g.tp->allReduce(parts);
  Tensor total = parts + sums * (1.0 - m_tpSummed);
  return total.sqrt().index_select(0, m_segments).to(values.scalar_type());
}

std::array<Tensor, 3> ModelState::gatherFull() {
  torch::NoGradGuard noGrad;
  drain();
  return {fromShards(joined(m_hostMaster, m_master)).to(torch::kCPU), fromShards(joined(m_hostM, m_m)).to(torch::kCPU),
          fromShards(joined(m_hostV, m_v)).to(torch::kCPU)};
}

void ModelState::load(const Tensor& master, const Tensor& m, const Tensor& v) {
  torch::NoGradGuard noGrad;
  drain();
  if (m_weights.defined()) m_weights.copy_(master);
  const Tensor shard = m_cfg.zeroStage == 0 ? master : toShard(master);
  const std::int64_t onDevice = m_shard - m_hostLen;
  if (!m_weights.defined() || !m_master.is_alias_of(m_weights)) m_master.copy_(shard.narrow(0, m_hostLen, onDevice));
  m_m.copy_(toShard(m).narrow(0, m_hostLen, onDevice));
  m_v.copy_(toShard(v).narrow(0, m_hostLen, onDevice));
  if (m_hostLen > 0) {
    m_hostMaster.copy_(shard.narrow(0, 0, m_hostLen));
    m_hostM.copy_(toShard(m).narrow(0, 0, m_hostLen));
    m_hostV.copy_(toShard(v).narrow(0, 0, m_hostLen));
    if (m_hostOnDevice.defined()) m_hostOnDevice.copy_(m_hostMaster);
  }
}

}  // namespace colo::executor::detail
