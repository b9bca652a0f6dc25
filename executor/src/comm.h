#pragma once
// Private: c10d process groups behind one small interface, so the rest of the executor does not care
// whether it runs on LibTorch 1.13 (ProcessGroup) or 2.x (Backend), on Gloo or NCCL.
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "colo/core/error.h"
#include "colo/core/plan.h"
#include "colo/executor/executor.h"

namespace colo::executor::detail {

using WorkPtr = c10::intrusive_ptr<c10d::Work>;  // what every c10d collective returns, LibTorch 1.13 and 2.x

/// A collective in flight. `wait()` blocks until it is done and returns its result (once: a second call
/// is an error); the inputs it reads stay alive inside it until then.
class Pending {
 public:
  Pending() = default;
  Pending(WorkPtr work, std::function<at::Tensor()> finish) : m_work(std::move(work)), m_finish(std::move(finish)) {}
  [[nodiscard]] bool active() const { return static_cast<bool>(m_finish); }
  at::Tensor wait();

 private:
  WorkPtr m_work;
  std::function<at::Tensor()> m_finish;
};

/// One communication group. Size-1 groups do nothing (no process group behind them).
class Comm {
 public:
  virtual ~Comm() = default;
  [[nodiscard]] virtual int rank() const = 0;
  [[nodiscard]] virtual int size() const = 0;
  /// In place, blocking.
  virtual void allReduce(at::Tensor& t, c10d::ReduceOp op) = 0;
  void allReduce(at::Tensor& t) { allReduce(t, c10d::ReduceOp::SUM); }
  [[nodiscard]] virtual WorkPtr allReduceAsync(at::Tensor& t) = 0;
  /// Every member's tensor concatenated along `dim` in rank order.
  [[nodiscard]] virtual at::Tensor allGather(const at::Tensor& t, std::int64_t dim) = 0;
  /// In flight (members must start their collectives on a group in the same order): every member's
  /// flat `t` concatenated in rank order; and the sum over the group of the flat `t` (numel divisible
  /// by the size), this member's 1/size of it (`t` may be overwritten: Gloo reduces it in place).
  [[nodiscard]] virtual Pending allGatherAsync(const at::Tensor& t) = 0;
  [[nodiscard]] virtual Pending reduceScatterAsync(const at::Tensor& t) = 0;
  /// Rows of `t` (dim 0) split by `sendRows` go to the members in order; returns what arrives, split by
  /// `recvRows` (the counts each member sends this one).
  [[nodiscard]] virtual at::Tensor allToAll(const at::Tensor& t, const std::vector<std::int64_t>& sendRows,
                                            const std::vector<std::int64_t>& recvRows) = 0;
  [[nodiscard]] virtual WorkPtr send(at::Tensor& t, int dst, int tag) = 0;
  virtual void recv(at::Tensor& t, int src, int tag) = 0;
  [[nodiscard]] virtual WorkPtr recvAsync(at::Tensor& t, int src, int tag) = 0;
  virtual void barrier() = 0;
};

/// The groups of one rank under a plan's parallel layout.
struct Groups {
  std::unique_ptr<Comm> world, tp, dp, pp, cp;
  std::unique_ptr<Comm> dpCp;       ///< dp x cp: gradients are averaged and ZeRO shards split over it (Megatron's)
  std::unique_ptr<Comm> ep;         ///< expert parallelism: ep consecutive members of dpCp
  std::unique_ptr<Comm> expertDp;   ///< the dpCp members holding this rank's experts (every ep-th)
  std::unique_ptr<Comm> embedding;  ///< first and last pipeline stage (tied embeddings with pp > 1)
  int tpRank = 0, dpRank = 0, ppRank = 0, cpRank = 0, epRank = 0;
};

/// Connects to the job's TCPStore and creates this rank's groups (every rank must call it): Gloo, or
/// NCCL on `device` (a CUDA device; needs a CUDA LibTorch).
/// Errors: kBadInput for a backend this build lacks, kInternal with the c10d message.
[[nodiscard]] Result<Groups> makeGroups(const WorldInfo& world, const Parallelism& parallel, bool embeddingGroup,
                                        const std::string& backend, int timeoutSeconds, const torch::Device& device = torch::kCPU);

}  // namespace colo::executor::detail
