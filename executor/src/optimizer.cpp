// The optimizer step on a shard of the flat fp32 master weights. AdamW as PyTorch's (decoupled weight
// decay, bias-corrected moments); LAMB and LARS scale each parameter's update by a trust ratio of norms
// taken over the whole parameter, so a sharded or tensor-parallel run steps exactly as one process.
#include <algorithm>

#include "colo/kernels/torch_ops.h"
#include "state.h"

namespace colo::executor::detail {

using torch::Tensor;

namespace {

// ||w|| / ||u|| where both are positive, else 1 (the papers' convention for zero norms).
Tensor trustRatio(const Tensor& weightNorm, const Tensor& updateNorm) {
  Tensor ratio = weightNorm / updateNorm;
  return torch::where(weightNorm.gt(0).logical_and(updateNorm.gt(0)), ratio, torch::ones_like(ratio));
}

}  // namespace

void optimizerStep(const OptimizerSettings& o, Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const OptimizerSettings::Norms& norms) {
  torch::NoGradGuard noGrad;
  const double t = static_cast<double>(o.step);
  // The clipping coefficient c scales the gradients as they are read: inside the fused AdamW's read,
  // else in the scalars of the unfused operators (g's moments: c g and c^2 g^2), with no scaled copy of
  // the whole shard.
  const double c = std::min(o.clip, 1.0);
  if (o.kind == Optimizer::kAdamW && o.fused && p.is_contiguous() && m.is_contiguous() && v.is_contiguous()) {
    kernels::torch_ops::adamwStep(p, g, m, v, {o.lr, o.beta1, o.beta2, o.epsilon, o.weightDecay, o.step}, c);
    return;
  }
  switch (o.kind) {
    case Optimizer::kAdamW: {
      m.mul_(o.beta1).add_(g, (1.0 - o.beta1) * c);
      v.mul_(o.beta2).addcmul_(g, g, (1.0 - o.beta2) * c * c);
      const double c1 = 1.0 - std::pow(o.beta1, t), c2 = 1.0 - std::pow(o.beta2, t);
      p.mul_(1.0 - o.lr * o.weightDecay);
      Tensor denominator = (v / c2).sqrt_().add_(o.epsilon);
      p.addcdiv_(m, denominator, -o.lr / c1);
      break;
    }
    case Optimizer::kLamb: {
      // You et al. 2019, Algorithm 2 with Adam's bias correction (as NVIDIA's and Colossal-AI's LAMB):
      // u = m^ / (sqrt(v^) + eps) + wd * w;  w -= lr * (||w|| / ||u||) * u.
      m.mul_(o.beta1).add_(g, (1.0 - o.beta1) * c);
      v.mul_(o.beta2).addcmul_(g, g, (1.0 - o.beta2) * c * c);
      const double c1 = 1.0 - std::pow(o.beta1, t), c2 = 1.0 - std::pow(o.beta2, t);
      Tensor update = (m / c1) / ((v / c2).sqrt_().add_(o.epsilon));
      update.add_(p, o.weightDecay);
      Tensor ratio = trustRatio(norms(p), norms(update));
      p.addcmul_(ratio, update, -o.lr);
      break;
    }
    case Optimizer::kLars: {
      // You et al. 2017, Algorithm 1: local lr = eta * ||w|| / (||g|| + wd * ||w||);
      // buffer = momentum * buffer + local lr * (g + wd * w);  w -= lr * buffer.
      Tensor weightNorm = norms(p);
      Tensor gradNorm = norms(g).mul_(c);
      Tensor local = o.trust * trustRatio(weightNorm, gradNorm + o.weightDecay * weightNorm);
      local = torch::where(weightNorm.gt(0).logical_and(gradNorm.gt(0)), local, torch::ones_like(local));
      m.mul_(o.momentum).add_(local * torch::add(g * c, p, o.weightDecay));
      p.add_(m, -o.lr);
      break;
    }
  }
}

}  // namespace colo::executor::detail
