// ZeRO-2/3's per-unit machinery: the autograd functions and hooks that gather a unit's weights as the
// forward and the backward reach it (prefetching the next one) and reduce-scatter its gradients as its
// backward ends (in flight while the backward goes on).
#include "state_units.h"

#include <c10/core/StorageImpl.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace colo::executor::detail {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

// Reduce-scatters kept in flight at once: one, which runs while the backward computes the unit before
// it, and is finished before the next unit's gradient buffer is made (FSDP2 frees each reduce-scatter's
// buffers when it issues the next). More would hold more gradient buffers for little more overlap.
constexpr std::size_t kReductionsInFlight = 1;

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The unit's parameters as the outputs of one autograd node: forward hands out tensors over the unit's
// weights, backward receives every parameter's gradient of the micro-batch at once and reduce-scatters
// them. `anchor` (a leaf) only makes autograd record the node.
struct UnitGather : torch::autograd::Function<UnitGather> {
  static variable_list forward(AutogradContext* ctx, ModelState* state, std::int64_t unit, Tensor anchor) {
    (void)anchor;
    ctx->saved_data["state"] = reinterpret_cast<std::int64_t>(state);
    ctx->saved_data["unit"] = unit;
    return state->bind(static_cast<int>(unit));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* state = reinterpret_cast<ModelState*>(ctx->saved_data["state"].toInt());
    const int unit = static_cast<int>(ctx->saved_data["unit"].toInt());
    if (state->reshards()) state->release(unit);  // first, so the weights and the gradient buffer never coexist
    state->reduceUnit(unit, grads);
    return {Tensor(), Tensor(), Tensor()};
  }
};

// Identity on a unit's output whose backward gathers the unit's weights before its backward needs them,
// and starts gathering the unit the backward reaches next.
struct PreBackward : torch::autograd::Function<PreBackward> {
  static Tensor forward(AutogradContext* ctx, Tensor x, ModelState* state, std::int64_t unit) {
    ctx->saved_data["state"] = reinterpret_cast<std::int64_t>(state);
    ctx->saved_data["unit"] = unit;
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto* state = reinterpret_cast<ModelState*>(ctx->saved_data["state"].toInt());
    const int unit = static_cast<int>(ctx->saved_data["unit"].toInt());
    state->materialize(unit);
    state->prefetch(unit, -1);
    return {g[0], Tensor(), Tensor()};
  }
};

}  // namespace

double bytesOf(const Tensor& t) { return t.defined() ? static_cast<double>(t.numel() * t.element_size()) : 0.0; }

Tensor alias(const Tensor& owner, std::int64_t offset, const std::vector<std::int64_t>& shape) {
  return torch::empty({0}, owner.options()).set_(owner.storage(), offset, shape, c10::contiguous_strides(shape));
}

void releaseStorage(const Tensor& owner) {
  c10::StorageImpl* impl = owner.storage().unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(at::DataPtr(nullptr, owner.device()));
  impl->set_nbytes(0);
}

void allocateStorage(const Tensor& owner, std::int64_t numel) {
  c10::StorageImpl* impl = owner.storage().unsafeGetStorageImpl();
  const auto bytes = static_cast<std::size_t>(numel * owner.element_size());
  impl->set_data_ptr_noswap(impl->allocator()->allocate(bytes));
  impl->set_nbytes(bytes);
}

std::vector<Tensor> ModelState::Hooks::enter(int unit) {
  const int u = m_units.at(static_cast<std::size_t>(unit));
  if (u < 0) return {};
  Unit& state = *m_state->m_units[static_cast<std::size_t>(u)];
  const bool wasLive = state.live;  // live already: no reshard (pipeline) or a recompute inside the backward
  if (!m_state->m_linked && std::find(m_order.begin(), m_order.end(), u) == m_order.end()) m_order.push_back(u);
  m_state->materialize(u);
  if (!wasLive) m_state->prefetch(u, +1);
  if (!torch::GradMode::is_enabled()) return m_state->bind(u);
  return UnitGather::apply(m_state, static_cast<std::int64_t>(u), state.anchor);
}

Tensor ModelState::Hooks::leave(int unit, const Tensor& out) {
  const int u = m_units.at(static_cast<std::size_t>(unit));
  if (u < 0) return out;
  Tensor wrapped = torch::GradMode::is_enabled() && out.requires_grad() ? PreBackward::apply(out, m_state, u) : out;
  if (m_state->reshards()) m_state->release(u);
  return wrapped;
}

// Collectives still in flight (a run that failed) hold their own references to the tensors they read
// and write, so the state need not wait for them.
ModelState::~ModelState() = default;

std::vector<Tensor> ModelState::bind(int unit) {
  Unit& u = *m_units[static_cast<std::size_t>(unit)];
  std::vector<Tensor> out;
  for (std::size_t i : u.slots) {
    const Slot& s = m_slots[i];
    out.push_back(m_cfg.zeroStage == 3 ? alias(u.storage, s.offset - u.offset, s.shape) : alias(m_weights, s.offset, s.shape));
  }
  return out;
}

void ModelState::startGather(Unit& u) {
  torch::NoGradGuard noGrad;
  u.gathering = m_group->allGatherAsync(masterSlice(u.shardOffset, u.numel / m_ways).contiguous());
  transient(static_cast<double>(u.numel * u.storage.element_size()));
}

void ModelState::materialize(int unit) {
  Unit& u = *m_units[static_cast<std::size_t>(unit)];
  if (m_cfg.zeroStage != 3 || u.live) return;
  torch::NoGradGuard noGrad;
  if (!u.gathering.active()) startGather(u);
  const auto t = std::chrono::steady_clock::now();
  Tensor gathered = u.gathering.wait();
  m_waitSeconds += since(t);
  allocateStorage(u.storage, u.numel);
  alias(u.storage, 0, {u.numel}).copy_(gathered);
  u.live = true;
}

void ModelState::prefetch(int unit, int direction) {
  if (m_cfg.zeroStage != 3 || !m_cfg.overlap) return;
  const Unit& from = *m_units[static_cast<std::size_t>(unit)];
  const int target = direction > 0 ? from.next : from.prev;
  if (target < 0) return;
  Unit& u = *m_units[static_cast<std::size_t>(target)];
  if (!u.live && !u.gathering.active()) startGather(u);
}

void ModelState::release(int unit) {
  Unit& u = *m_units[static_cast<std::size_t>(unit)];
  if (m_cfg.zeroStage != 3 || !u.live) return;
  releaseStorage(u.storage);
  u.live = false;
  m_transient -= static_cast<double>(u.numel * u.storage.element_size());
}

void ModelState::reduceUnit(int unit, const std::vector<Tensor>& grads) {
  Unit& u = *m_units[static_cast<std::size_t>(unit)];
  torch::NoGradGuard noGrad;
  // The reduction in flight finishes before this unit's buffer is made (so at most one waits).
  if (m_holding < 0) {
    while (m_reducing.size() >= kReductionsInFlight) finishReduction();
  }
  Tensor flat = torch::zeros({u.numel}, m_master.options());
  transient(bytesOf(flat));
  for (std::size_t k = 0; k < u.slots.size(); ++k) {
    if (k >= grads.size() || !grads[k].defined()) continue;
    const Slot& s = m_slots[u.slots[k]];
    flat.narrow(0, s.offset - u.offset, s.numel).copy_(grads[k].reshape({-1}));
  }
  if (m_holding >= 0) {
    m_held[m_holding].emplace_back(unit, flat);
    return;
  }
  startReduction(unit, flat);
}

void ModelState::startReduction(int unit, Tensor flat) {
  while (m_reducing.size() >= kReductionsInFlight) finishReduction();
  const double bytes = bytesOf(flat);
  m_reducing.push_back({m_group->reduceScatterAsync(flat), unit, bytes});
  if (!m_cfg.overlap) finishReduction();
}

bool ModelState::addWeightGradient(std::int64_t microBatch, const Tensor& weight, const Tensor& gradient) {
  auto held = m_held.find(microBatch);
  if (held == m_held.end()) return false;
  const c10::StorageImpl* storage = weight.storage().unsafeGetStorageImpl();
  for (auto& [unit, flat] : held->second) {
    const Unit& u = *m_units[static_cast<std::size_t>(unit)];
    // ZeRO-3 binds a unit's weights over its own storage, ZeRO-2 over the whole flat buffer.
    const bool over = m_cfg.zeroStage == 3 ? u.storage.storage().unsafeGetStorageImpl() == storage
                                           : m_weights.storage().unsafeGetStorageImpl() == storage;
    const std::int64_t at = weight.storage_offset() - (m_cfg.zeroStage == 3 ? 0 : u.offset);
    if (!over || at < 0 || at + weight.numel() > u.numel) continue;
    torch::NoGradGuard noGrad;
    flat.narrow(0, at, weight.numel()).add_(gradient.reshape({-1}).to(flat.scalar_type()));
    return true;
  }
  return false;
}

void ModelState::releaseHeld(std::int64_t microBatch) {
  auto held = m_held.find(microBatch);
  if (held == m_held.end()) return;
  auto units = std::move(held->second);
  m_held.erase(held);
  torch::NoGradGuard noGrad;
  for (auto& [unit, flat] : units) startReduction(unit, std::move(flat));
}

void ModelState::finishReduction() {
  Reduction r = std::move(m_reducing.front());
  m_reducing.pop_front();
  const auto t = std::chrono::steady_clock::now();
  const Tensor mine = r.pending.wait();
  m_waitSeconds += since(t);
  const Unit& u = *m_units[static_cast<std::size_t>(r.unit)];
  m_gradShard.narrow(0, u.shardOffset, u.numel / m_ways).add_(mine);  // in start order: the sums do not depend on timing
  m_transient -= r.bytes;
}

void ModelState::drain() {
  if (!m_held.empty()) throw std::logic_error("zero-bubble: a micro-batch's weight gradients were never computed");
  while (!m_reducing.empty()) finishReduction();
  for (std::size_t u = 0; u < m_units.size(); ++u) {
    if (m_units[u]->gathering.active()) materialize(static_cast<int>(u));
  }
}

void ModelState::endStep() {
  drain();
  for (std::size_t u = 0; u < m_units.size(); ++u) release(static_cast<int>(u));
  if (m_linked) return;
  // The first step's forward order: each unit learns the one used after and before it in its chunk.
  for (const auto& hooks : m_hooks) {
    const std::vector<int>& order = hooks->order();
    for (std::size_t i = 0; i + 1 < order.size(); ++i) {
      m_units[static_cast<std::size_t>(order[i])]->next = order[i + 1];
      m_units[static_cast<std::size_t>(order[i + 1])]->prev = order[i];
    }
  }
  m_linked = true;
}

}  // namespace colo::executor::detail
