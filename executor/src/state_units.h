#pragma once
// Private to state.cpp and state_units.cpp: one unit of the ZeRO-2/3 layout (a layer, the embeddings,
// the head, a layer's experts) and the hooks a chunk calls as its forward enters and leaves each unit.
#include <torch/torch.h>

#include <vector>

#include "comm.h"
#include "state.h"

namespace colo::executor::detail {

double bytesOf(const torch::Tensor& t);

/// A tensor over `owner`'s storage with its own version counter: writing through it does not mark the
/// tensors autograd saved (which alias the same storage) as modified.
torch::Tensor alias(const torch::Tensor& owner, std::int64_t offset, const std::vector<std::int64_t>& shape);

/// ZeRO-3 frees a unit's weights between uses as FSDP does: the storage keeps its identity (autograd's
/// saved tensors point at it) and loses its bytes, which come back before the next use.
void releaseStorage(const torch::Tensor& owner);
void allocateStorage(const torch::Tensor& owner, std::int64_t numel);

struct ModelState::Unit {
  std::vector<std::size_t> slots;  ///< into m_slots, in the chunk's order
  std::int64_t offset = 0, numel = 0, shardOffset = 0;
  torch::Tensor storage;  ///< ZeRO-3: the gathered weights (no bytes while released)
  bool live = false;
  Pending gathering;      ///< ZeRO-3: its all-gather while in flight (a prefetch)
  int next = -1, prev = -1;  ///< the units used after and before it in the forward (once recorded)
  torch::Tensor anchor;
};

class ModelState::Hooks final : public UnitHooks {
 public:
  Hooks(ModelState* state, std::vector<int> units) : m_state(state), m_units(std::move(units)) {}
  std::vector<torch::Tensor> enter(int unit) override;
  torch::Tensor leave(int unit, const torch::Tensor& out) override;
  /// The state units of this chunk in the order the first step's forward gathered them.
  [[nodiscard]] const std::vector<int>& order() const { return m_order; }

 private:
  ModelState* m_state;
  std::vector<int> m_units;  ///< chunk unit -> state unit (-1: empty)
  std::vector<int> m_order;
};

}  // namespace colo::executor::detail
