// Ring attention. Forward: cp steps; at each, this rank's queries meet the key/value block it holds
// (its own first, then each predecessor's), the block's scores are masked by global position and merged
// into a running max, sum and output (online softmax), and the block moves on to the next rank while
// the next arrives from the previous. Backward (flash-attention style, from the saved log-sum-exp):
// keys, values and their gradient accumulators travel the ring together; after cp moves each block is
// home with every rank's contribution.
#include "ring_attention.h"

#include <limits>
#include <optional>

namespace colo::executor::detail {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Keys or values repeated to the query heads (grouped-query attention), and the way back for gradients.
Tensor expandHeads(const Tensor& kv, std::int64_t heads) {
  const std::int64_t group = heads / kv.size(1);
  return group == 1 ? kv : kv.repeat_interleave(group, 1);
}
Tensor foldHeads(const Tensor& grad, std::int64_t kvHeads) {
  const std::int64_t group = grad.size(1) / kvHeads;
  if (group == 1) return grad;
  return grad.view({grad.size(0), kvHeads, group, grad.size(2), grad.size(3)}).sum(2);
}

// True where a query at position qp may not see a key at position kp.
Tensor causalMask(const Tensor& queryPositions, const Tensor& keyPositions) {
  return keyPositions.unsqueeze(0).gt(queryPositions.unsqueeze(1));  // [sq, sk]
}

int prev(int rank, int size) { return (rank - 1 + size) % size; }
int next(int rank, int size) { return (rank + 1) % size; }

// `block` on its way to the next rank while what the previous one sends (same shape) arrives: started
// before the block in hand is computed on, waited for after, so the transfer hides behind it.
class Pass {
 public:
  Pass(Comm* cp, const Tensor& block, int tag) : m_out(block.contiguous()), m_in(torch::empty_like(m_out)) {
    m_sent = cp->send(m_out, next(cp->rank(), cp->size()), tag);
    m_received = cp->recvAsync(m_in, prev(cp->rank(), cp->size()), tag);
  }
  Tensor wait() {
    m_received->wait();
    m_sent->wait();
    return m_in;
  }

 private:
  Tensor m_out, m_in;
  WorkPtr m_sent, m_received;
};

struct RingAttention : torch::autograd::Function<RingAttention> {
  static Tensor forward(AutogradContext* ctx, Tensor q, Tensor k, Tensor v, Comm* cp, std::int64_t seqLen) {
    const int n = cp->size(), me = cp->rank();
    const std::int64_t heads = q.size(1), d = q.size(3);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    const Tensor qf = q.to(torch::kFloat32);
    const Tensor mine = contextParallelPositions(seqLen, n, me).to(q.device());
    Tensor runMax = torch::full({q.size(0), heads, q.size(2)}, -std::numeric_limits<float>::infinity(), qf.options());
    Tensor runSum = torch::zeros_like(runMax);
    Tensor acc = torch::zeros_like(qf);
    Tensor kv = torch::cat({k, v}, -1);
    for (int step = 0; step < n; ++step) {
      std::optional<Pass> incoming;
      if (step + 1 < n) incoming.emplace(cp, kv, step);
      const int owner = (me - step + n) % n;
      const Tensor kb = expandHeads(kv.narrow(-1, 0, d), heads).to(torch::kFloat32);
      const Tensor vb = expandHeads(kv.narrow(-1, d, d), heads).to(torch::kFloat32);
      Tensor scores = torch::matmul(qf, kb.transpose(-2, -1)) * scale;
      scores = scores.masked_fill(causalMask(mine, contextParallelPositions(seqLen, n, owner).to(q.device())),
                                  -std::numeric_limits<float>::infinity());
      const Tensor blockMax = std::get<0>(scores.max(-1));
      const Tensor newMax = torch::maximum(runMax, blockMax);
      const Tensor safeMax = newMax.masked_fill(newMax.isinf(), 0.0);  // rows that have seen no key yet
      const Tensor alpha = (runMax - safeMax).exp();
      const Tensor p = (scores - safeMax.unsqueeze(-1)).exp();
      runSum = runSum * alpha + p.sum(-1);
      acc = acc * alpha.unsqueeze(-1) + torch::matmul(p, vb);
      runMax = newMax;
      if (incoming) kv = incoming->wait();
    }
    const Tensor out = acc / runSum.unsqueeze(-1);
    const Tensor lse = runMax + runSum.log();
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["cp"] = reinterpret_cast<std::int64_t>(cp);
    ctx->saved_data["seq"] = seqLen;
    return out.to(q.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    Comm* cp = reinterpret_cast<Comm*>(ctx->saved_data["cp"].toInt());
    const std::int64_t seqLen = ctx->saved_data["seq"].toInt();
    const int n = cp->size(), me = cp->rank();
    const std::int64_t heads = q.size(1), kvHeads = k.size(1), d = q.size(3);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    const Tensor qf = q.to(torch::kFloat32);
    const Tensor dOut = grads[0].to(torch::kFloat32);
    const Tensor delta = (dOut * out).sum(-1, true);  // [b, h, s, 1]
    const Tensor mine = contextParallelPositions(seqLen, n, me).to(q.device());
    Tensor dq = torch::zeros_like(qf);
    // Around the ring: keys and values (fp32, [b, kv heads, s, 2d]), sent on as soon as they arrive, and
    // behind them their gradients so far, sent once this rank has added its part. After n moves every
    // block's gradients are home.
    Tensor kv = torch::cat({k.to(torch::kFloat32), v.to(torch::kFloat32)}, -1);
    Tensor dkv = torch::zeros_like(kv);
    for (int step = 0; step < n; ++step) {
      std::optional<Pass> nextKv;
      if (step + 1 < n) nextKv.emplace(cp, kv, 2 * n + step);
      const int owner = (me - step + n) % n;
      const Tensor kb = expandHeads(kv.narrow(-1, 0, d), heads);
      const Tensor vb = expandHeads(kv.narrow(-1, d, d), heads);
      Tensor scores = torch::matmul(qf, kb.transpose(-2, -1)) * scale;
      scores = scores.masked_fill(causalMask(mine, contextParallelPositions(seqLen, n, owner).to(q.device())),
                                  -std::numeric_limits<float>::infinity());
      const Tensor p = (scores - lse.unsqueeze(-1)).exp();          // [b, h, sq, sk]
      const Tensor dv = torch::matmul(p.transpose(-2, -1), dOut);   // [b, h, sk, d]
      const Tensor dp = torch::matmul(dOut, vb.transpose(-2, -1));  // [b, h, sq, sk]
      const Tensor ds = p * (dp - delta) * scale;
      dq += torch::matmul(ds, kb);
      const Tensor dk = torch::matmul(ds.transpose(-2, -1), qf);
      dkv.narrow(-1, 0, d).add_(foldHeads(dk, kvHeads));
      dkv.narrow(-1, d, d).add_(foldHeads(dv, kvHeads));
      dkv = Pass(cp, dkv, n + step).wait();
      if (nextKv) kv = nextKv->wait();
    }
    return {dq.to(q.scalar_type()), dkv.narrow(-1, 0, d).to(k.scalar_type()), dkv.narrow(-1, d, d).to(v.scalar_type()),
            Tensor(), Tensor()};
  }
};

}  // namespace

torch::Tensor contextParallelPositions(std::int64_t seqLen, int cp, int rank) {
  const std::int64_t chunk = seqLen / (2 * cp);
  return torch::cat({torch::arange(rank * chunk, (rank + 1) * chunk, torch::kInt64),
                     torch::arange((2 * cp - 1 - rank) * chunk, (2 * cp - rank) * chunk, torch::kInt64)});
}

torch::Tensor ringAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, Comm* cp, std::int64_t seqLen) {
  return RingAttention::apply(q, k, v, cp, seqLen);
}

}  // namespace colo::executor::detail
