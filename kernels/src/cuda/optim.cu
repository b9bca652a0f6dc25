// AdamW and LAMB over many flat buffers at once: a table of up to kTable tensors travels as a kernel
// argument (Apex's multi_tensor_apply idea); blocks along y pick the tensor, along x its elements. And
// the gradients' sum of squares for the global norm, in two deterministic passes.
#include <algorithm>

#include "../optim_math.h"
#include "common.cuh"

namespace colo::kernels::cuda {
namespace detail {
namespace {

constexpr int kTable = 32;
constexpr unsigned kMaxBlocksPerTensor = 1024;

template <class G>
struct Table {
  float* param[kTable];
  const DeviceT<G>* grad[kTable];
  float* m[kTable];
  float* v[kTable];
  __nv_bfloat16* copy[kTable];
  Index numel[kTable];
};

constexpr unsigned kSquaresBlocks = 1024;  // partial sums of addSumOfSquares (its scratch)

// Each block's sum of squares of its grid-stride share of x, into partials[blockIdx.x].
template <class D>
__global__ void squaresKernel(const D* x, Index n, double* partials) {
  __shared__ double shared[kBlock / 32];
  double sum = 0;
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += static_cast<Index>(gridDim.x) * blockDim.x) {
    const double v = load(x, i);
    sum += v * v;
  }
  sum = blockSum(sum, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// One block: *out += the partial sums, in a fixed order.
__global__ void squaresTotalKernel(const double* partials, unsigned count, double* out) {
  __shared__ double shared[kBlock / 32];
  double sum = 0;
  for (unsigned i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  sum = blockSum(sum, shared);
  if (threadIdx.x == 0) *out += sum;
}

template <class G>
__global__ void adamwKernel(Table<G> t, float lr, float beta1, float beta2, float eps, float wd, math::AdamFactors f, float gradScale) {
  const int k = blockIdx.y;
  float* p = t.param[k];
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < t.numel[k]; i += static_cast<Index>(gridDim.x) * blockDim.x) {
    float m = t.m[k][i], v = t.v[k][i];
    const float u = math::adamMoments(load(t.grad[k], i) * gradScale, m, v, beta1, beta2, f, eps);
    t.m[k][i] = m;
    t.v[k][i] = v;
    const float w = p[i] - lr * (u + wd * p[i]);
    p[i] = w;
    if (t.copy[k]) t.copy[k][i] = __float2bfloat16_rn(w);
  }
}

// LAMB stage 1: the moments; sums of squares of the weights and of the update into norms[2k], norms[2k+1].
template <class G>
__global__ void lambMomentsKernel(Table<G> t, float beta1, float beta2, float eps, float wd, math::AdamFactors f, float gradScale,
                                  float* norms) {
  __shared__ float shared[kBlock / 32];
  const int k = blockIdx.y;
  float ww = 0, uu = 0;
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < t.numel[k]; i += static_cast<Index>(gridDim.x) * blockDim.x) {
    float m = t.m[k][i], v = t.v[k][i];
    const float w = t.param[k][i];
    const float u = math::adamMoments(load(t.grad[k], i) * gradScale, m, v, beta1, beta2, f, eps) + wd * w;
    t.m[k][i] = m;
    t.v[k][i] = v;
    ww += w * w;
    uu += u * u;
  }
  ww = blockSum(ww, shared);
  uu = blockSum(uu, shared);
  if (threadIdx.x == 0) {
    atomicAdd(norms + 2 * k, ww);
    atomicAdd(norms + 2 * k + 1, uu);
  }
}

// LAMB stage 2: the update from the new moments, scaled by the tensor's trust ratio.
template <class G>
__global__ void lambApplyKernel(Table<G> t, float lr, float eps, float wd, math::AdamFactors f, const float* norms) {
  const int k = blockIdx.y;
  const float trust = math::trustRatio(sqrtf(norms[2 * k]), sqrtf(norms[2 * k + 1]));
  float* p = t.param[k];
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < t.numel[k]; i += static_cast<Index>(gridDim.x) * blockDim.x) {
    const float w = p[i] - lr * trust * (math::adamUpdate(t.m[k][i], t.v[k][i], f, eps) + wd * p[i]);
    p[i] = w;
    if (t.copy[k]) t.copy[k][i] = __float2bfloat16_rn(w);
  }
}

// Calls launch(table, count, firstIndex, blocksPerTensor) for each group of up to kTable tensors.
template <class G, class Launch>
Status forEachGroup(std::span<const ref::FlatTensor<G>> tensors, Launch launch) {
  for (std::size_t first = 0; first < tensors.size(); first += kTable) {
    const std::size_t count = std::min<std::size_t>(kTable, tensors.size() - first);
    Table<G> table{};
    Index largest = 0;
    for (std::size_t j = 0; j < count; ++j) {
      const auto& x = tensors[first + j];
      table.param[j] = x.param;
      table.grad[j] = dev(x.grad);
      table.m[j] = x.expAvg;
      table.v[j] = x.expAvgSq;
      table.copy[j] = reinterpret_cast<__nv_bfloat16*>(x.modelCopy);
      table.numel[j] = x.numel;
      largest = std::max(largest, x.numel);
    }
    const unsigned blocks = std::min(kMaxBlocksPerTensor, blocksFor(largest));
    launch(table, static_cast<unsigned>(count), first, blocks);
    if (auto e = launched()) return e;
  }
  return 0;
}

}  // namespace
}  // namespace detail

using namespace detail;

Index sumOfSquaresScratch() { return detail::kSquaresBlocks; }

template <class T>
Status addSumOfSquares(const T* x, Index n, double* scratch, double* out, Stream stream) {
  if (n <= 0) return 0;
  auto s = static_cast<cudaStream_t>(stream);
  const unsigned blocks = std::min(detail::kSquaresBlocks, detail::blocksFor(n, 4 * detail::kBlock));
  detail::squaresKernel<<<blocks, detail::kBlock, 0, s>>>(detail::dev(x), n, scratch);
  if (auto e = detail::launched()) return e;
  detail::squaresTotalKernel<<<1, detail::kBlock, 0, s>>>(scratch, blocks, out);
  return detail::launched();
}

template <class G>
Status adamwStep(std::span<const ref::FlatTensor<G>> tensors, const ref::AdamWConfig& c, float gradScale, Stream stream) {
  const math::AdamFactors f = math::adamFactors(c.beta1, c.beta2, c.step);
  return forEachGroup<G>(tensors, [&](const Table<G>& table, unsigned count, std::size_t, unsigned blocks) {
    adamwKernel<G><<<dim3(blocks, count), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(table, c.lr, c.beta1, c.beta2, c.eps,
                                                                                           c.weightDecay, f, gradScale);
  });
}

Index lambScratchFloats(std::size_t tensors) { return static_cast<Index>(2 * tensors); }

template <class G>
Status lambStep(std::span<const ref::FlatTensor<G>> tensors, const ref::LambConfig& c, float gradScale, float* scratch, Stream stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (tensors.empty()) return 0;
  if (auto e = cudaMemsetAsync(scratch, 0, sizeof(float) * 2 * tensors.size(), s)) return static_cast<Status>(e);
  const math::AdamFactors f = math::adamFactors(c.beta1, c.beta2, c.step);
  if (auto e = forEachGroup<G>(tensors, [&](const Table<G>& table, unsigned count, std::size_t first, unsigned blocks) {
        lambMomentsKernel<G><<<dim3(blocks, count), kBlock, 0, s>>>(table, c.beta1, c.beta2, c.eps, c.weightDecay, f, gradScale,
                                                                     scratch + 2 * first);
      })) {
    return e;
  }
  return forEachGroup<G>(tensors, [&](const Table<G>& table, unsigned count, std::size_t first, unsigned blocks) {
    lambApplyKernel<G><<<dim3(blocks, count), kBlock, 0, s>>>(table, c.lr, c.eps, c.weightDecay, f, scratch + 2 * first);
  });
}

template Status addSumOfSquares<float>(const float*, Index, double*, double*, Stream);
template Status addSumOfSquares<bf16>(const bf16*, Index, double*, double*, Stream);
template Status adamwStep<float>(std::span<const ref::FlatTensor<float>>, const ref::AdamWConfig&, float, Stream);
template Status adamwStep<bf16>(std::span<const ref::FlatTensor<bf16>>, const ref::AdamWConfig&, float, Stream);
template Status lambStep<float>(std::span<const ref::FlatTensor<float>>, const ref::LambConfig&, float, float*, Stream);
template Status lambStep<bf16>(std::span<const ref::FlatTensor<bf16>>, const ref::LambConfig&, float, float*, Stream);

}  // namespace colo::kernels::cuda
