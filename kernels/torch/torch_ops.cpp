// LibTorch autograd wrappers of the fused kernels: shape checks, the device dispatch, saved tensors.
#include "colo/kernels/torch_ops.h"

#include <algorithm>
#include <string>
#include <vector>

#include "colo/kernels/cuda.h"
#include "colo/kernels/reference.h"
#if defined(COLO_TORCH_CUDA)
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/Sleep.h>
#endif
#if defined(COLO_KERNELS_TORCH_CUDA)
// The CUDA call of a dispatch, on stream `s` (compiled only where the CUDA kernels are linked).
#define COLO_ON_GPU(...) [&](void* s) -> int { return __VA_ARGS__; }
#else
#define COLO_ON_GPU(...) [&](void*) -> int { return 0; }
#endif

namespace colo::kernels::torch_ops {
namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

template <class T>
T* ptr(const Tensor& t) {
  return reinterpret_cast<T*>(t.data_ptr());
}
template <class T>
const T* cptr(const Tensor& t) {
  return reinterpret_cast<const T*>(t.data_ptr());
}

// Calls f(T{}) with T = float or bf16, the type of `t`.
template <class F>
void byType(const Tensor& t, const char* op, F&& f) {
  if (t.scalar_type() == at::kFloat) f(float{});
  else if (t.scalar_type() == at::kBFloat16) f(bf16{});
  else TORCH_CHECK(false, "colo fused ", op, ": expected float32 or bfloat16, got ", t.scalar_type());
}

// Runs the CPU reference or the CUDA kernel (a status-returning call) for the device of `t`.
template <class Cpu, class Gpu>
void dispatch(const Tensor& t, const char* op, Cpu&& cpu, Gpu&& gpu) {
  if (t.is_cpu()) {
    cpu();
    return;
  }
  TORCH_CHECK(t.is_cuda(), "colo fused ", op, ": tensors must be on the CPU or a CUDA device");
#if defined(COLO_KERNELS_TORCH_CUDA)
  const int status = gpu(static_cast<void*>(at::cuda::getCurrentCUDAStream().stream()));
  TORCH_CHECK(status == 0, "colo fused ", op, ": ", cuda::errorString(status));
#else
  (void)gpu;
  TORCH_CHECK(false, "colo fused ", op, ": this build has no CUDA kernels (they need a CUDA LibTorch and nvcc)");
#endif
}

std::int64_t colsOf(const Tensor& t) { return t.size(-1); }
std::int64_t rowsOf(const Tensor& t) { return t.numel() / std::max<std::int64_t>(1, colsOf(t)); }
at::TensorOptions floats(const Tensor& like) { return like.options().dtype(at::kFloat); }
at::ScalarType savedType(AutogradContext* ctx, const char* key) { return static_cast<at::ScalarType>(ctx->saved_data[key].toInt()); }

struct RmsNormFn : torch::autograd::Function<RmsNormFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& xIn, const Tensor& wIn, double eps) {
    Tensor x = xIn.contiguous(), w = wIn.to(x.scalar_type()).contiguous();
    const std::int64_t rows = rowsOf(x), cols = colsOf(x);
    const auto e = static_cast<float>(eps);
    Tensor y = at::empty_like(x), rstd = at::empty({rows}, floats(x));
    byType(x, "rms_norm", [&](auto tag) {
      using T = decltype(tag);
      dispatch(x, "rms_norm", [&] { ref::rmsnormForward(cptr<T>(x), cptr<T>(w), ptr<T>(y), ptr<float>(rstd), rows, cols, e); },
               COLO_ON_GPU(cuda::rmsnormForward(cptr<T>(x), cptr<T>(w), ptr<T>(y), ptr<float>(rstd), rows, cols, e, s)));
    });
    ctx->save_for_backward({x, w, rstd});
    ctx->saved_data["w"] = static_cast<std::int64_t>(wIn.scalar_type());
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &w = saved[1], &rstd = saved[2];
    Tensor dy = g[0].to(x.scalar_type()).contiguous();
    const std::int64_t rows = rowsOf(x), cols = colsOf(x);
    Tensor dx = at::empty_like(x), dw = at::empty({cols}, floats(x));
    byType(x, "rms_norm backward", [&](auto tag) {
      using T = decltype(tag);
      dispatch(
          x, "rms_norm backward",
          [&] { ref::rmsnormBackward(cptr<T>(dy), cptr<T>(x), cptr<T>(w), cptr<float>(rstd), ptr<T>(dx), ptr<float>(dw), rows, cols); },
          COLO_ON_GPU(cuda::rmsnormBackward(cptr<T>(dy), cptr<T>(x), cptr<T>(w), cptr<float>(rstd), ptr<T>(dx), ptr<float>(dw), rows, cols, s)));
    });
    return {dx, dw.to(savedType(ctx, "w")), Tensor()};
  }
};

struct LayerNormFn : torch::autograd::Function<LayerNormFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& xIn, const Tensor& wIn, const Tensor& bIn, double eps) {
    Tensor x = xIn.contiguous(), w = wIn.to(x.scalar_type()).contiguous(), b = bIn.to(x.scalar_type()).contiguous();
    const std::int64_t rows = rowsOf(x), cols = colsOf(x);
    const auto e = static_cast<float>(eps);
    Tensor y = at::empty_like(x), mean = at::empty({rows}, floats(x)), rstd = at::empty({rows}, floats(x));
    byType(x, "layer_norm", [&](auto tag) {
      using T = decltype(tag);
      dispatch(
          x, "layer_norm",
          [&] { ref::layernormForward(cptr<T>(x), cptr<T>(w), cptr<T>(b), ptr<T>(y), ptr<float>(mean), ptr<float>(rstd), rows, cols, e); },
          COLO_ON_GPU(cuda::layernormForward(cptr<T>(x), cptr<T>(w), cptr<T>(b), ptr<T>(y), ptr<float>(mean), ptr<float>(rstd), rows, cols, e, s)));
    });
    ctx->save_for_backward({x, w, mean, rstd});
    ctx->saved_data["w"] = static_cast<std::int64_t>(wIn.scalar_type());
    ctx->saved_data["b"] = static_cast<std::int64_t>(bIn.scalar_type());
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &w = saved[1], &mean = saved[2], &rstd = saved[3];
    Tensor dy = g[0].to(x.scalar_type()).contiguous();
    const std::int64_t rows = rowsOf(x), cols = colsOf(x);
    // The weight and bias gradients side by side: one cast to the parameters' type for both.
    Tensor dx = at::empty_like(x), dwb = at::empty({2, cols}, floats(x)), dw = dwb[0], db = dwb[1];
    byType(x, "layer_norm backward", [&](auto tag) {
      using T = decltype(tag);
      dispatch(x, "layer_norm backward",
               [&] {
                 ref::layernormBackward(cptr<T>(dy), cptr<T>(x), cptr<T>(w), cptr<float>(mean), cptr<float>(rstd), ptr<T>(dx), ptr<float>(dw),
                                        ptr<float>(db), rows, cols);
               },
               COLO_ON_GPU(cuda::layernormBackward(cptr<T>(dy), cptr<T>(x), cptr<T>(w), cptr<float>(mean), cptr<float>(rstd), ptr<T>(dx),
                                                   ptr<float>(dw), ptr<float>(db), rows, cols, s)));
    });
    if (savedType(ctx, "w") == savedType(ctx, "b")) {
      const Tensor both = dwb.to(savedType(ctx, "w"));
      return {dx, both[0], both[1], Tensor()};
    }
    return {dx, dw.to(savedType(ctx, "w")), db.to(savedType(ctx, "b")), Tensor()};
  }
};

// On a GPU the kernels read gate and up where they are (two tensors); the CPU reference takes them as one
// [rows, 2 * cols] tensor, gate first.
struct SwigluFn : torch::autograd::Function<SwigluFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& gateIn, const Tensor& upIn) {
    TORCH_CHECK(gateIn.sizes() == upIn.sizes(), "colo fused swiglu: gate ", gateIn.sizes(), " and up ", upIn.sizes(), " differ");
    Tensor gate = gateIn.contiguous(), up = upIn.to(gate.scalar_type()).contiguous();
    const std::int64_t rows = rowsOf(gate), cols = colsOf(gate);
    Tensor y = at::empty(gate.sizes(), gate.options());
    byType(gate, "swiglu", [&](auto tag) {
      using T = decltype(tag);
      dispatch(gate, "swiglu",
               [&] {
                 Tensor gu = at::cat({gate, up}, -1).contiguous();
                 ref::swigluForward(cptr<T>(gu), ptr<T>(y), rows, cols);
               },
               COLO_ON_GPU(cuda::swigluForwardSplit(cptr<T>(gate), cptr<T>(up), ptr<T>(y), rows, cols, s)));
    });
    ctx->save_for_backward({gate, up});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &gate = saved[0], &up = saved[1];
    Tensor dy = g[0].to(gate.scalar_type()).contiguous();
    const std::int64_t rows = rowsOf(dy), cols = colsOf(dy);
    Tensor dGate = at::empty_like(gate), dUp = at::empty_like(up);
    byType(gate, "swiglu backward", [&](auto tag) {
      using T = decltype(tag);
      dispatch(gate, "swiglu backward",
               [&] {
                 Tensor gu = at::cat({gate, up}, -1).contiguous(), dgu = at::empty_like(gu);
                 ref::swigluBackward(cptr<T>(dy), cptr<T>(gu), ptr<T>(dgu), rows, cols);
                 auto halves = dgu.chunk(2, -1);
                 dGate.copy_(halves[0]);
                 dUp.copy_(halves[1]);
               },
               COLO_ON_GPU(cuda::swigluBackwardSplit(cptr<T>(dy), cptr<T>(gate), cptr<T>(up), ptr<T>(dGate), ptr<T>(dUp), rows, cols, s)));
    });
    return {dGate, dUp};
  }
};

struct BiasGeluFn : torch::autograd::Function<BiasGeluFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& xIn, const Tensor& bIn) {
    Tensor x = xIn.contiguous(), b = bIn.to(x.scalar_type()).contiguous();
    const std::int64_t rows = rowsOf(x), cols = colsOf(x);
    Tensor y = at::empty_like(x);
    byType(x, "bias_gelu", [&](auto tag) {
      using T = decltype(tag);
      dispatch(x, "bias_gelu", [&] { ref::biasGeluForward(cptr<T>(x), cptr<T>(b), ptr<T>(y), rows, cols); },
               COLO_ON_GPU(cuda::biasGeluForward(cptr<T>(x), cptr<T>(b), ptr<T>(y), rows, cols, s)));
    });
    ctx->save_for_backward({x, b});
    ctx->saved_data["b"] = static_cast<std::int64_t>(bIn.scalar_type());
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &b = saved[1];
    Tensor dy = g[0].to(x.scalar_type()).contiguous();
    const std::int64_t rows = rowsOf(x), cols = colsOf(x);
    Tensor dx = at::empty_like(x), db = at::empty({cols}, floats(x));
    byType(x, "bias_gelu backward", [&](auto tag) {
      using T = decltype(tag);
      dispatch(x, "bias_gelu backward",
               [&] { ref::biasGeluBackward(cptr<T>(dy), cptr<T>(x), cptr<T>(b), ptr<T>(dx), ptr<float>(db), rows, cols); },
               COLO_ON_GPU(cuda::biasGeluBackward(cptr<T>(dy), cptr<T>(x), cptr<T>(b), ptr<T>(dx), ptr<float>(db), rows, cols, s)));
    });
    return {dx, db.to(savedType(ctx, "b"))};
  }
};

// x [batch, seq, heads, dim]; cos/sin [seq, dim / 2] repeated over the batch to one row per token.
struct RotaryFn : torch::autograd::Function<RotaryFn> {
  static Tensor run(const Tensor& in, const Tensor& cos, const Tensor& sin, bool inverse) {
    Tensor x = in.contiguous();
    const std::int64_t tokens = x.size(0) * x.size(1), heads = x.size(2), dim = x.size(3);
    Tensor out = at::empty_like(x);
    byType(x, "rotary", [&](auto tag) {
      using T = decltype(tag);
      auto cpu = [&] {
        if (inverse) ref::rotaryBackward(cptr<T>(x), cptr<float>(cos), cptr<float>(sin), ptr<T>(out), tokens, heads, dim);
        else ref::rotaryForward(cptr<T>(x), cptr<float>(cos), cptr<float>(sin), ptr<T>(out), tokens, heads, dim);
      };
      dispatch(x, "rotary", cpu,
               COLO_ON_GPU(inverse ? cuda::rotaryBackward(cptr<T>(x), cptr<float>(cos), cptr<float>(sin), ptr<T>(out), tokens, heads, dim, s)
                                   : cuda::rotaryForward(cptr<T>(x), cptr<float>(cos), cptr<float>(sin), ptr<T>(out), tokens, heads, dim, s)));
    });
    return out;
  }
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& cosIn, const Tensor& sinIn) {
    TORCH_CHECK(x.dim() == 4 && x.size(3) % 2 == 0, "colo fused rotary: expected [batch, seq, heads, even dim], got ", x.sizes());
    TORCH_CHECK(cosIn.size(0) == x.size(1) && cosIn.size(1) * 2 == x.size(3), "colo fused rotary: cos ", cosIn.sizes(), " for x ", x.sizes());
    Tensor cos = cosIn.to(at::kFloat).repeat({x.size(0), 1}).contiguous(), sin = sinIn.to(at::kFloat).repeat({x.size(0), 1}).contiguous();
    ctx->save_for_backward({cos, sin});
    return run(x, cos, sin, false);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto saved = ctx->get_saved_variables();
    return {run(g[0], saved[0], saved[1], true), Tensor(), Tensor()};
  }
};

struct CrossEntropyFn : torch::autograd::Function<CrossEntropyFn> {
  static Tensor forward(AutogradContext* ctx, const Tensor& logitsIn, const Tensor& targetIn, std::int64_t start, AllReduce* reduce) {
    Tensor logits = logitsIn.contiguous(), target = targetIn.to(at::kLong).contiguous();
    TORCH_CHECK(logits.dim() == 2 && target.numel() == logits.size(0), "colo fused cross_entropy: logits ", logits.sizes(), ", targets ",
                target.sizes());
    const std::int64_t rows = logits.size(0), shard = logits.size(1);
    Tensor max = at::empty({rows}, floats(logits)), sum = at::empty({rows}, floats(logits)), picked = at::empty({rows}, floats(logits));
    byType(logits, "cross_entropy", [&](auto tag) {
      using T = decltype(tag);
      dispatch(logits, "cross_entropy",
               [&] {
                 ref::crossEntropyShardStats(cptr<T>(logits), cptr<std::int64_t>(target), start, ptr<float>(max), ptr<float>(sum),
                                             ptr<float>(picked), rows, shard);
               },
               COLO_ON_GPU(cuda::crossEntropyShardStats(cptr<T>(logits), cptr<std::int64_t>(target), start, ptr<float>(max), ptr<float>(sum),
                                                        ptr<float>(picked), rows, shard, s)));
    });
    // Across the shards: the global max, the sums rescaled to it, the target's logit.
    Tensor globalMax = max.clone();
    (*reduce)(globalMax, true);
    sum.mul_((max - globalMax).exp_());
    (*reduce)(sum, false);
    (*reduce)(picked, false);
    Tensor logSumExp = sum.log_().add_(globalMax);
    Tensor ignored = target.lt(0);
    Tensor loss = (logSumExp - picked).masked_fill_(ignored, 0.0);
    ctx->save_for_backward({logits, target, logSumExp});
    ctx->saved_data["start"] = start;
    ctx->saved_data["dtype"] = static_cast<std::int64_t>(logitsIn.scalar_type());
    return loss;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto saved = ctx->get_saved_variables();
    const Tensor &logits = saved[0], &target = saved[1], &logSumExp = saved[2];
    const std::int64_t start = ctx->saved_data["start"].toInt(), rows = logits.size(0), shard = logits.size(1);
    Tensor grad = g[0].to(at::kFloat).contiguous();
    Tensor d = at::empty_like(logits);
    byType(logits, "cross_entropy backward", [&](auto tag) {
      using T = decltype(tag);
      dispatch(logits, "cross_entropy backward",
               [&] {
                 ref::crossEntropyShardBackward(cptr<T>(logits), cptr<std::int64_t>(target), start, cptr<float>(logSumExp), cptr<float>(grad),
                                                ptr<T>(d), rows, shard);
               },
               COLO_ON_GPU(cuda::crossEntropyShardBackward(cptr<T>(logits), cptr<std::int64_t>(target), start, cptr<float>(logSumExp),
                                                           cptr<float>(grad), ptr<T>(d), rows, shard, s)));
    });
    return {d.to(savedType(ctx, "dtype")), Tensor(), Tensor(), Tensor()};
  }
};

}  // namespace

#if defined(COLO_TORCH_CUDA)
struct DeviceTimer::Events {
  at::cuda::CUDAEvent start{cudaEventDefault}, stop{cudaEventDefault};
};
#else
struct DeviceTimer::Events {};
#endif

DeviceTimer::DeviceTimer(const at::Device& device) : m_device(device) {
#if defined(COLO_TORCH_CUDA)
  if (device.is_cuda()) m_events = std::make_unique<Events>();
#endif
}

DeviceTimer::~DeviceTimer() = default;

void DeviceTimer::start(double hideHostSeconds) {
  (void)hideHostSeconds;  // CUDA only
#if defined(COLO_TORCH_CUDA)
  if (m_events) {
    // ~2 GHz SM clocks (H100 1.98, H200 1.98, A100 1.41): the spin need only outlast the host's issuing.
    if (hideHostSeconds > 0) at::cuda::sleep(static_cast<std::int64_t>(hideHostSeconds * 2e9));
    m_events->start.record(at::cuda::getCurrentCUDAStream(m_device.index()));
    return;
  }
#endif
  m_start = std::chrono::steady_clock::now();
}

double DeviceTimer::seconds() {
#if defined(COLO_TORCH_CUDA)
  if (m_events) {
    m_events->stop.record(at::cuda::getCurrentCUDAStream(m_device.index()));
    m_events->stop.synchronize();
    return static_cast<double>(m_events->start.elapsed_time(m_events->stop)) / 1e3;
  }
#endif
  if (m_device.is_cuda()) torch::cuda::synchronize(m_device.index());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - m_start).count();
}

bool cudaAvailable() {
#if defined(COLO_KERNELS_TORCH_CUDA)
  return true;
#else
  return false;
#endif
}

Tensor rmsNorm(const Tensor& x, const Tensor& weight, double eps) { return RmsNormFn::apply(x, weight, eps); }
Tensor layerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) { return LayerNormFn::apply(x, weight, bias, eps); }
Tensor swiglu(const Tensor& gate, const Tensor& up) { return SwigluFn::apply(gate, up); }
Tensor biasGelu(const Tensor& x, const Tensor& bias) { return BiasGeluFn::apply(x, bias); }
Tensor rotary(const Tensor& x, const Tensor& cos, const Tensor& sin) { return RotaryFn::apply(x, cos, sin); }

void adamwStep(Tensor& param, const Tensor& gradIn, Tensor& expAvg, Tensor& expAvgSq, const AdamW& c, double gradScale) {
  TORCH_CHECK(param.scalar_type() == at::kFloat && expAvg.scalar_type() == at::kFloat && expAvgSq.scalar_type() == at::kFloat,
              "colo fused adamw: weights and moments must be float32");
  TORCH_CHECK(param.is_contiguous() && expAvg.is_contiguous() && expAvgSq.is_contiguous(), "colo fused adamw: tensors must be contiguous");
  TORCH_CHECK(gradIn.numel() == param.numel() && expAvg.numel() == param.numel() && expAvgSq.numel() == param.numel(),
              "colo fused adamw: sizes differ");
  const Tensor grad = gradIn.contiguous();
  const ref::AdamWConfig config{static_cast<float>(c.lr),  static_cast<float>(c.beta1),       static_cast<float>(c.beta2),
                                static_cast<float>(c.eps), static_cast<float>(c.weightDecay), c.step};
  const auto scale = static_cast<float>(gradScale);
  byType(grad, "adamw", [&](auto tag) {
    using G = decltype(tag);
    const std::vector<ref::FlatTensor<G>> list{
        {ptr<float>(param), cptr<G>(grad), ptr<float>(expAvg), ptr<float>(expAvgSq), nullptr, param.numel()}};
    dispatch(param, "adamw", [&] { ref::adamwStep<G>(list, config, scale); },
             COLO_ON_GPU(cuda::adamwStep<G>(list, config, scale, s)));
  });
}

void addSumOfSquares(const Tensor& xIn, Tensor& out) {
  TORCH_CHECK(out.scalar_type() == at::kDouble && out.numel() == 1 && out.is_contiguous() && out.device() == xIn.device(),
              "colo sum of squares: out must be one float64 element on the input's device");
  const Tensor x = xIn.contiguous();
  byType(x, "sum_of_squares", [&](auto tag) {
    using T = decltype(tag);
    Tensor scratch;
#if defined(COLO_KERNELS_TORCH_CUDA)
    if (x.is_cuda()) scratch = at::empty({cuda::sumOfSquaresScratch()}, out.options());
#endif
    dispatch(x, "sum_of_squares", [&] { ref::addSumOfSquares(cptr<T>(x), x.numel(), ptr<double>(out)); },
             COLO_ON_GPU(cuda::addSumOfSquares(cptr<T>(x), x.numel(), ptr<double>(scratch), ptr<double>(out), s)));
  });
}

Tensor vocabParallelCrossEntropy(const Tensor& logits, const Tensor& target, std::int64_t vocabStart, AllReduce allReduce) {
  // The reducer lives in the autograd graph only during the forward (the backward needs no collective).
  return CrossEntropyFn::apply(logits, target, vocabStart, &allReduce);
}

}  // namespace colo::kernels::torch_ops
