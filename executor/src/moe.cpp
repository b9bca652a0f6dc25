// A mixture-of-experts layer: a top-k router (softmax, the chosen probabilities renormalised, as Mixtral
// and Qwen-MoE), a Switch-style load-balancing loss, routed experts as gated MLPs that take every token
// sent to them (dropless), an optional shared expert, and expert parallelism by all-to-all over the
// ep group (tokens to the ranks holding their experts, the results back).
#include <numeric>

#include "model.h"

namespace colo::executor::detail {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// All-to-all whose backward is the reverse all-to-all.
struct AllToAll : torch::autograd::Function<AllToAll> {
  static Tensor forward(AutogradContext* ctx, Tensor x, Comm* comm, std::vector<std::int64_t> sendRows, std::vector<std::int64_t> recvRows) {
    ctx->saved_data["comm"] = reinterpret_cast<std::int64_t>(comm);
    ctx->saved_data["send"] = sendRows;
    ctx->saved_data["recv"] = recvRows;
    return comm->allToAll(x, sendRows, recvRows);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    Comm* comm = reinterpret_cast<Comm*>(ctx->saved_data["comm"].toInt());
    return {comm->allToAll(g[0], ctx->saved_data["recv"].toIntVector(), ctx->saved_data["send"].toIntVector()), Tensor(), Tensor(),
            Tensor()};
  }
};

// Identity on the hidden states whose backward also starts the auxiliary loss's backward with its scale
// (the load-balancing loss reaches the router without joining the reported loss; Megatron's
// MoEAuxLossAutoScaler).
struct AttachAuxLoss : torch::autograd::Function<AttachAuxLoss> {
  static Tensor forward(AutogradContext* ctx, Tensor h, Tensor aux, double scale) {
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["dtype"] = static_cast<std::int64_t>(aux.scalar_type());
    return h;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {g[0], torch::full({}, ctx->saved_data["scale"].toDouble(), torch::TensorOptions().dtype(dtype).device(g[0].device())),
            Tensor()};
  }
};

std::vector<std::int64_t> toVector(const Tensor& counts) {
  const Tensor c = counts.to(torch::kCPU, torch::kInt64).contiguous();
  return {c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel()};
}

}  // namespace

torch::Tensor Chunk::moe(std::int64_t layer, const torch::Tensor& x) {
  const ModelSpec& s = m_cfg.spec;
  const std::string L = "layers." + std::to_string(layer) + ".";
  const std::int64_t experts = s.moe.numExperts, k = s.moe.topK, hidden = s.hiddenSize;
  const std::int64_t perRank = experts / m_cfg.ep;
  const Tensor flat = x.reshape({-1, hidden});
  const std::int64_t tokens = flat.size(0);

  // Router in fp32: top-k of the softmax, renormalised over the chosen experts.
  const Tensor probs = torch::softmax(torch::matmul(flat, p(L + "moe.router.weight").t()).to(torch::kFloat32), -1);
  auto [topProbs, topExperts] = probs.topk(k, -1);
  const Tensor gates = (topProbs / topProbs.sum(-1, true)).to(x.scalar_type());
  // Load balancing (Switch Transformer): E x sum_e f_e P_e, f_e the share of assignments to e (no
  // gradient), P_e the mean router probability of e.
  const Tensor share = torch::zeros({experts}, probs.options()).index_add_(0, topExperts.reshape({-1}),
                                                                         torch::ones({tokens * k}, probs.options())) /
                       static_cast<double>(tokens * k);
  const Tensor aux = static_cast<double>(experts) * (share * probs.mean(0)).sum();

  // Every (token, choice) pair, ordered by expert (and so by the ep rank holding it).
  const Tensor expertOf = topExperts.reshape({-1});
  const Tensor order = std::get<1>(expertOf.sort(/*stable=*/true, 0, false));
  const Tensor sortedExpert = expertOf.index_select(0, order);
  const Tensor tokenOf = torch::arange(tokens, torch::kInt64).repeat_interleave(k).to(x.device()).index_select(0, order);
  const Tensor gateOf = gates.reshape({-1}).index_select(0, order);
  Tensor routed = flat.index_select(0, tokenOf);
  Tensor routedExpert = sortedExpert;
  std::vector<std::int64_t> sendRows, recvRows;
  if (m_cfg.ep > 1) {
    Comm* ep = m_cfg.epComm;
    sendRows = toVector(torch::bincount(torch::div(sortedExpert, perRank, "floor"), {}, m_cfg.ep));
    recvRows = toVector(ep->allToAll(torch::tensor(sendRows, torch::kInt64), std::vector<std::int64_t>(m_cfg.ep, 1),
                                     std::vector<std::int64_t>(m_cfg.ep, 1)));
    routed = AllToAll::apply(routed, ep, sendRows, recvRows);
    routedExpert = ep->allToAll(sortedExpert, sendRows, recvRows);
  }
  // This rank's experts on the rows sent to them (dropless: every row). An expert sent no row still runs
  // (on none): the autograd graph, and with it the collectives its backward makes (the reverse
  // all-to-all, ZeRO's reduce-scatter of the expert's gradients), is the same on every rank.
  Tensor results = torch::zeros({routed.size(0), hidden}, routed.options());
  for (std::int64_t e = m_cfg.epRank * perRank; e < (m_cfg.epRank + 1) * perRank; ++e) {
    const Tensor rows = routedExpert.eq(e).nonzero().reshape({-1});
    results = results.index_add(0, rows, mlp(L + "moe.experts." + std::to_string(e) + ".", routed.index_select(0, rows)));
  }
  if (m_cfg.ep > 1) results = AllToAll::apply(results, m_cfg.epComm, recvRows, sendRows);
  Tensor out = torch::zeros_like(flat).index_add(0, tokenOf, results * gateOf.unsqueeze(1));
  if (s.moe.sharedExpertFfnHiddenSize > 0) out = out + mlp(L + "moe.shared.", flat);
  out = out.view(x.sizes());
  return torch::GradMode::is_enabled() && aux.requires_grad() ? AttachAuxLoss::apply(out, aux, m_cfg.auxLossScale) : out;
}

}  // namespace colo::executor::detail
