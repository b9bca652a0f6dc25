#include "comm.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <numeric>

#include "colo/core/rank_layout.h"

// Gloo where LibTorch ships its headers (Debian's does); NCCL on a CUDA LibTorch where nccl.h is found
// (CMake looks beside PyTorch's NCCL wheel: COLO_NCCL_INCLUDE_DIR).
#if __has_include(<gloo/algorithm.h>)
#define COLO_HAS_GLOO 1
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#if defined(COLO_TORCH_CUDA) && __has_include(<nccl.h>)
#define COLO_HAS_NCCL 1
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL  // PyTorch's CUDA builds have the NCCL process group; its header asks for this
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace colo::executor::detail {

at::Tensor Pending::wait() {
  if (!m_finish) throw std::logic_error("waiting on a collective that is not in flight");
  if (m_work) m_work->wait();
  m_work = {};
  auto finish = std::move(m_finish);
  m_finish = {};
  return finish();
}

namespace {

// One process group. On NCCL (m_device a CUDA device) a CPU tensor handed to a collective (a loss, a
// norm, routing counts) travels through a device copy; Gloo takes it as it is.
#if defined(COLO_HAS_NCCL)
template <class PG>
constexpr bool kIsNccl = std::is_same_v<PG, c10d::ProcessGroupNCCL>;
#else
template <class PG>
constexpr bool kIsNccl = false;
#endif

template <class PG>
class GroupComm final : public Comm {
 public:
  GroupComm(c10::intrusive_ptr<PG> pg, int rank, int size, torch::Device device = torch::kCPU)
      : m_pg(std::move(pg)), m_rank(rank), m_size(size), m_device(device) {}
  int rank() const override { return m_rank; }
  int size() const override { return m_size; }
  void allReduce(at::Tensor& t, c10d::ReduceOp op) override {
    if (m_size == 1) return;
    if (m_device.is_cuda() && !t.is_cuda()) {
      at::Tensor onDevice = t.to(m_device);
      allReduce(onDevice, op);
      t.copy_(onDevice);
      return;
    }
    if (t.scalar_type() == at::kBFloat16) {
      // Gloo reduces bf16 only in newer LibTorch versions: reduce in fp32 (also the more exact sum).
      at::Tensor wide = t.to(at::kFloat);
      allReduce(wide, op);
      t.copy_(wide);
      return;
    }
    std::vector<at::Tensor> v{t};
    c10d::AllreduceOptions o;
    o.reduceOp = op;
    m_pg->allreduce(v, o)->wait();
  }
  WorkPtr allReduceAsync(at::Tensor& t) override {
    std::vector<at::Tensor> v{t};
    return m_pg->allreduce(v);
  }
  at::Tensor allGather(const at::Tensor& t, std::int64_t dim) override {
    if (m_size == 1) return t;
    if (m_device.is_cuda() && !t.is_cuda()) return allGather(t.to(m_device), dim).to(t.device());
    if (t.scalar_type() == at::kBFloat16) return allGather(t.to(at::kFloat), dim).to(at::kBFloat16);
    std::vector<at::Tensor> in{t.contiguous()};
    std::vector<std::vector<at::Tensor>> out(1);
    for (int r = 0; r < m_size; ++r) out[0].push_back(torch::empty_like(in[0]));
    m_pg->allgather(out, in)->wait();
    return torch::cat(out[0], dim);
  }
  Pending allGatherAsync(const at::Tensor& t) override {
    if (m_size == 1) return {{}, [t] { return t; }};
    // Gloo gathers bf16 only in newer LibTorch versions: in fp32, back to bf16 when done.
    const auto dtype = t.scalar_type();
    std::vector<at::Tensor> in{dtype == at::kBFloat16 ? t.to(at::kFloat) : t.contiguous()};
    auto out = std::make_shared<std::vector<std::vector<at::Tensor>>>(1);
    for (int r = 0; r < m_size; ++r) (*out)[0].push_back(torch::empty_like(in[0]));
    WorkPtr work = m_pg->allgather(*out, in);
    return {work, [in, out, dtype] { return torch::cat((*out)[0], 0).to(dtype); }};
  }
  Pending reduceScatterAsync(const at::Tensor& t) override {
    if (m_size == 1) return {{}, [t] { return t; }};
    // Gloo has no reduce-scatter in LibTorch 1.13: an all-reduce in place (in fp32 for bf16) of which
    // this member keeps its part (the same numbers, twice the traffic of a ring reduce-scatter).
    const auto dtype = t.scalar_type();
    std::vector<at::Tensor> v{dtype == at::kBFloat16 ? t.to(at::kFloat) : t};
    WorkPtr work = m_pg->allreduce(v);
    const std::int64_t part = t.numel() / m_size;
    return {work, [v, part, rank = m_rank, dtype] { return v[0].narrow(0, rank * part, part).to(dtype); }};
  }
  at::Tensor allToAll(const at::Tensor& t, const std::vector<std::int64_t>& sendRows, const std::vector<std::int64_t>& recvRows) override {
    if (m_size == 1) return t;
    if (m_device.is_cuda() && !t.is_cuda()) return allToAll(t.to(m_device), sendRows, recvRows).to(t.device());
    if constexpr (kIsNccl<PG>) {
      // NCCL's own all-to-all: queued sends to peers that are still sending can stall each other on the
      // GPU (a send waits for its receive), which point-to-point pairs below would risk.
      at::Tensor in = t.contiguous();
      std::vector<std::int64_t> shape = in.sizes().vec();
      shape[0] = std::accumulate(recvRows.begin(), recvRows.end(), std::int64_t{0});
      at::Tensor out = at::empty(shape, in.options());
      std::vector<std::int64_t> outSplits = recvRows, inSplits = sendRows;
      m_pg->alltoall_base(out, in, outSplits, inSplits)->wait();
      return out;
    }
    if (t.scalar_type() == at::kBFloat16) return allToAll(t.to(at::kFloat), sendRows, recvRows).to(at::kBFloat16);
    // By point-to-point sends and receives: Gloo's alltoallv mismatches message sizes under load
    // (pytorch/gloo#334, seen here too), and every member knows every count.
    at::Tensor in = t.contiguous();
    std::vector<std::int64_t> shape = in.sizes().vec();
    shape[0] = std::accumulate(recvRows.begin(), recvRows.end(), std::int64_t{0});
    at::Tensor out = at::empty(shape, in.options());
    const int tag = kAllToAllTag + (m_allToAlls++ % 1000);
    std::vector<at::Tensor> parts;
    std::vector<WorkPtr> sent;
    std::int64_t from = 0, to = 0;
    for (int q = 0; q < m_size; ++q) {
      const auto rows = sendRows[static_cast<std::size_t>(q)];
      at::Tensor part = in.narrow(0, from, rows);
      if (q == m_rank) {
        out.narrow(0, std::accumulate(recvRows.begin(), recvRows.begin() + q, std::int64_t{0}), rows).copy_(part);
      } else if (rows > 0) {
        parts.push_back(part.contiguous());
        sent.push_back(send(parts.back(), q, tag));
      }
      from += rows;
    }
    for (int q = 0; q < m_size; ++q) {
      const auto rows = recvRows[static_cast<std::size_t>(q)];
      if (q != m_rank && rows > 0) {
        at::Tensor into = at::empty({rows}, in.options()).resize_(out.narrow(0, to, rows).sizes());
        recv(into, q, tag);
        out.narrow(0, to, rows).copy_(into);
      }
      to += rows;
    }
    for (auto& w : sent) w->wait();
    return out;
  }
  WorkPtr send(at::Tensor& t, int dst, int tag) override {
    std::vector<at::Tensor> v{t};
    return m_pg->send(v, dst, tag);
  }
  void recv(at::Tensor& t, int src, int tag) override { recvAsync(t, src, tag)->wait(); }
  WorkPtr recvAsync(at::Tensor& t, int src, int tag) override {
    std::vector<at::Tensor> v{t};
    return m_pg->recv(v, src, tag);
  }
  void barrier() override {
    if (m_size <= 1) return;
    c10d::BarrierOptions options;
    if (m_device.is_cuda()) options.device_ids = {m_device.index()};  // NCCL would guess the device from the rank
    m_pg->barrier(options)->wait();
  }

 private:
  static constexpr int kAllToAllTag = 1 << 20;  // clear of the pipeline's send/recv tags
  c10::intrusive_ptr<PG> m_pg;
  int m_rank, m_size;
  torch::Device m_device;
  int m_allToAlls = 0;
};

// A group of one: every collective is the identity.
class SelfComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allReduce(at::Tensor&, c10d::ReduceOp) override {}
  WorkPtr allReduceAsync(at::Tensor&) override { return {}; }
  at::Tensor allGather(const at::Tensor& t, std::int64_t) override { return t; }
  Pending allGatherAsync(const at::Tensor& t) override { return {{}, [t] { return t; }}; }
  Pending reduceScatterAsync(const at::Tensor& t) override { return {{}, [t] { return t; }}; }
  at::Tensor allToAll(const at::Tensor& t, const std::vector<std::int64_t>&, const std::vector<std::int64_t>&) override { return t; }
  WorkPtr send(at::Tensor&, int, int) override { throw std::logic_error("send in a group of one"); }
  void recv(at::Tensor&, int, int) override { throw std::logic_error("recv in a group of one"); }
  WorkPtr recvAsync(at::Tensor&, int, int) override { throw std::logic_error("recv in a group of one"); }
  void barrier() override {}
};

// A process group of `size` members over `store`, as this member; each throws where this build lacks it.
std::unique_ptr<Comm> glooGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout,
                                const std::string& host) {
#if defined(COLO_HAS_GLOO)
  auto options = c10d::ProcessGroupGloo::Options::create();
  options->timeout = timeout;
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(host));
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
  return std::make_unique<GroupComm<c10d::ProcessGroupGloo>>(pg, rank, size);
#else
  (void)store, (void)rank, (void)size, (void)timeout, (void)host;
  throw std::runtime_error("--backend gloo: this LibTorch ships no Gloo headers (gloo/algorithm.h); use --backend nccl");
#endif
}

std::unique_ptr<Comm> ncclGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout,
                                const torch::Device& device) {
#if defined(COLO_HAS_NCCL)
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
  return std::make_unique<GroupComm<c10d::ProcessGroupNCCL>>(pg, rank, size, device);
#else
  (void)store, (void)rank, (void)size, (void)timeout, (void)device;
  throw std::runtime_error("--backend nccl: this build found no nccl.h (CMake looks beside PyTorch's NCCL wheel, or set "
                           "COLO_NCCL_INCLUDE_DIR); one GPU still runs, several need it");
#endif
}

}  // namespace

Result<Groups> makeGroups(const WorldInfo& world, const Parallelism& parallel, bool embeddingGroup,
                          const std::string& backend, int timeoutSeconds, const torch::Device& device) {
#if !defined(COLO_TORCH_CUDA)
  if (backend == "nccl") {
    return fail(Error::badInput("--backend nccl: this build's LibTorch has no NCCL process group (build against the "
                                "CUDA LibTorch of an installed PyTorch to get it); use --backend gloo"));
  }
#endif
  if (backend == "nccl" && !device.is_cuda()) return fail(Error::badInput("--backend nccl needs a CUDA device"));
  try {
    const auto timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeoutSeconds) * 1000);
    c10d::TCPStoreOptions storeOptions;
    storeOptions.port = static_cast<std::uint16_t>(world.masterPort);
    storeOptions.isServer = world.rank == 0;
    storeOptions.numWorkers = world.world;
    storeOptions.timeout = timeout;
    auto store = c10::make_intrusive<c10d::TCPStore>(world.masterAddr, storeOptions);
    const std::string host = world.masterAddr == "localhost" ? "127.0.0.1" : world.masterAddr;
    // Members of a group, in group-rank order, are the ranks that differ from this one only along `dims`.
    auto make = [&](const std::string& name, const std::vector<std::int64_t>& members) -> std::unique_ptr<Comm> {
      if (members.size() <= 1) return std::make_unique<SelfComm>();
      int myIndex = -1;
      std::string key = name + ":";
      for (std::size_t i = 0; i < members.size(); ++i) {
        if (members[i] == world.rank) myIndex = static_cast<int>(i);
        key += std::to_string(members[i]) + ",";
      }
      if (myIndex < 0) return nullptr;
      auto prefixed = c10::make_intrusive<c10d::PrefixStore>(key, store);
      const int size = static_cast<int>(members.size());
      return backend == "nccl" ? ncclGroup(prefixed, myIndex, size, timeout, device) : glooGroup(prefixed, myIndex, size, timeout, host);
    };
    const RankCoordinates me = coordinatesOf(world.rank, parallel);
    auto along = [&](const std::string& dim) {
      std::vector<std::int64_t> members;
      RankCoordinates c = me;
      for (std::int64_t i = 0; i < parallelDegree(parallel, dim); ++i) {
        c.along(dim) = i;
        members.push_back(rankOf(c, parallel));
      }
      return members;
    };
    Groups g;
    std::vector<std::int64_t> everyone;
    for (std::int64_t r = 0; r < world.world; ++r) everyone.push_back(r);
    g.world = make("world", everyone);
    g.tp = make("tp", along("tp"));
    g.dp = make("dp", along("dp"));
    g.pp = make("pp", along("pp"));
    g.cp = make("cp", along("cp"));
    // dp x cp, in rank order: the members that differ from this rank only along dp or cp.
    std::vector<std::int64_t> dpCp;
    RankCoordinates c = me;
    for (std::int64_t d = 0; d < parallel.dp; ++d) {
      for (std::int64_t k = 0; k < parallel.cp; ++k) {
        c.along("dp") = d;
        c.along("cp") = k;
        dpCp.push_back(rankOf(c, parallel));
      }
    }
    std::sort(dpCp.begin(), dpCp.end());
    g.dpCp = make("dpcp", dpCp);
    // Expert parallelism inside dp x cp: ep consecutive members share their tokens; every ep-th member
    // holds the same experts.
    const auto mine = static_cast<std::int64_t>(std::find(dpCp.begin(), dpCp.end(), world.rank) - dpCp.begin());
    const std::int64_t ep = parallel.ep;
    std::vector<std::int64_t> epMembers, expertDp;
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(dpCp.size()); ++i) {
      if (i / ep == mine / ep) epMembers.push_back(dpCp[static_cast<std::size_t>(i)]);
      if (i % ep == mine % ep) expertDp.push_back(dpCp[static_cast<std::size_t>(i)]);
    }
    g.ep = make("ep", epMembers);
    g.expertDp = make("edp", expertDp);
    g.epRank = static_cast<int>(mine % ep);
    g.cpRank = static_cast<int>(me.cp);
    g.tpRank = static_cast<int>(me.tp);
    g.dpRank = static_cast<int>(me.dp);
    g.ppRank = static_cast<int>(me.pp);
    if (embeddingGroup && parallel.pp > 1 && (me.pp == 0 || me.pp == parallel.pp - 1)) {
      const auto pp = along("pp");
      g.embedding = make("embedding", {pp.front(), pp.back()});
    } else {
      g.embedding = std::make_unique<SelfComm>();
    }
    return g;
  } catch (const std::exception& e) {
    return fail(Error::internal("c10d (rank " + std::to_string(world.rank) + "): " + e.what()));
  }
}

}  // namespace colo::executor::detail
