// The CUDA kernels against their CPU references, in fp32 and bf16 (label gpu). Skips, naming the reason,
// where the process sees no CUDA device; CI builds it so the kernels always link.
#include <cuda_runtime.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "colo/kernels/cuda.h"
#include "colo/kernels/reference.h"
#include "kernels_test_support.h"

namespace colo::kernels {
namespace {

using namespace test;
using ref::Index;

#define COLO_SKIP_WITHOUT_GPU()                                                                  \
  do {                                                                                           \
    if (cuda::deviceCount() == 0) GTEST_SKIP() << cuda::unavailableReason();                     \
  } while (0)
#define COLO_CUDA_OK(call)                                     \
  do {                                                         \
    const cuda::Status coloStatus = (call);                    \
    ASSERT_EQ(coloStatus, 0) << cuda::errorString(coloStatus); \
  } while (0)

// A device copy of a host vector (or `n` elements of zeros); back() copies it home.
template <class T>
class DeviceVec {
 public:
  explicit DeviceVec(const std::vector<T>& host) : m_n(host.size()) {
    if (cudaMalloc(&m_p, bytes()) == cudaSuccess) cudaMemcpy(m_p, host.data(), bytes(), cudaMemcpyHostToDevice);
  }
  explicit DeviceVec(std::size_t n) : m_n(n) {
    if (cudaMalloc(&m_p, bytes()) == cudaSuccess) cudaMemset(m_p, 0, bytes());
  }
  ~DeviceVec() { cudaFree(m_p); }
  DeviceVec(const DeviceVec&) = delete;
  DeviceVec& operator=(const DeviceVec&) = delete;
  T* get() const { return static_cast<T*>(m_p); }
  std::vector<T> back() const {
    std::vector<T> host(m_n);
    cudaDeviceSynchronize();
    cudaMemcpy(host.data(), m_p, bytes(), cudaMemcpyDeviceToHost);
    return host;
  }

 private:
  std::size_t bytes() const { return m_n * sizeof(T); }
  void* m_p = nullptr;
  std::size_t m_n;
};

Vec floats(const std::vector<float>& v) { return v; }
Vec floats(const std::vector<bf16>& v) { return toFloats(v); }

template <class T>
std::vector<T> as(const Vec& v) {
  if constexpr (std::is_same_v<T, bf16>) return toBf16(v);
  else return v;
}

template <class T>
constexpr float tolerance() {
  return std::is_same_v<T, bf16> ? 2.0f / 128 : 2e-5f;
}

template <class T>
class CudaKernels : public ::testing::Test {
 protected:
  void norms(Index cols);
  void pointwise(Index cols);
};
using Types = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(CudaKernels, Types);

// Rows of 64 and 1000 are whole packs (8 bf16, 4 fp32) of at most 8 a lane: a warp a row, some lanes
// idle; rows of 4096 are whole packs but longer (a block a row); rows of 1003 are not packs (one element
// at a time). None is a multiple of the block, and the column reduction has several row groups.
TYPED_TEST(CudaKernels, NormsMatchTheReference) {
  COLO_SKIP_WITHOUT_GPU();
  for (const Index cols : {Index{64}, Index{1000}, Index{4096}, Index{1003}}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    this->norms(cols);
  }
}

template <class T>
void CudaKernels<T>::norms(Index cols) {
  const Index rows = 130;
  const auto x = as<T>(randomVec(rows * cols, 1, 2.0f, 0.5f)), w = as<T>(randomVec(cols, 2, 0.3f, 1.0f));
  const auto b = as<T>(randomVec(cols, 3)), dy = as<T>(randomVec(rows * cols, 4));
  // RMSNorm
  std::vector<T> y(x.size()), dx(x.size());
  Vec rstd(rows), dw(cols), mean(rows), db(cols);
  ref::rmsnormForward(x.data(), w.data(), y.data(), rstd.data(), rows, cols, 1e-5f);
  ref::rmsnormBackward(dy.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), rows, cols);
  DeviceVec<T> dX(x), dW(w), dB(b), dDy(dy), dY(x.size()), dDx(x.size());
  DeviceVec<float> dRstd(rows), dMean(rows), dDw(cols), dDb(cols);
  COLO_CUDA_OK(cuda::rmsnormForward(dX.get(), dW.get(), dY.get(), dRstd.get(), rows, cols, 1e-5f, nullptr));
  COLO_CUDA_OK(cuda::rmsnormBackward(dDy.get(), dX.get(), dW.get(), dRstd.get(), dDx.get(), dDw.get(), rows, cols, nullptr));
  EXPECT_TRUE(near(floats(dY.back()), floats(y), tolerance<T>()));
  EXPECT_TRUE(near(dRstd.back(), rstd, 1e-5f));
  EXPECT_TRUE(near(floats(dDx.back()), floats(dx), tolerance<T>()));
  EXPECT_TRUE(near(dDw.back(), dw, 1e-4f));
  // LayerNorm
  ref::layernormForward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), rows, cols, 1e-5f);
  ref::layernormBackward(dy.data(), x.data(), w.data(), mean.data(), rstd.data(), dx.data(), dw.data(), db.data(), rows, cols);
  COLO_CUDA_OK(cuda::layernormForward(dX.get(), dW.get(), dB.get(), dY.get(), dMean.get(), dRstd.get(), rows, cols, 1e-5f, nullptr));
  COLO_CUDA_OK(cuda::layernormBackward(dDy.get(), dX.get(), dW.get(), dMean.get(), dRstd.get(), dDx.get(), dDw.get(), dDb.get(), rows,
                                       cols, nullptr));
  EXPECT_TRUE(near(floats(dY.back()), floats(y), tolerance<T>()));
  EXPECT_TRUE(near(dMean.back(), mean, 1e-5f));
  EXPECT_TRUE(near(dRstd.back(), rstd, 1e-5f));
  EXPECT_TRUE(near(floats(dDx.back()), floats(dx), tolerance<T>()));
  EXPECT_TRUE(near(dDw.back(), dw, 1e-4f));
  EXPECT_TRUE(near(dDb.back(), db, 1e-4f));
}

// Rows of 1024 go by packs, rows of 333 one element at a time.
TYPED_TEST(CudaKernels, PointwiseKernelsMatchTheReference) {
  COLO_SKIP_WITHOUT_GPU();
  for (const Index cols : {Index{333}, Index{1024}}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    this->pointwise(cols);
  }
}

template <class T>
void CudaKernels<T>::pointwise(Index cols) {
  const Index rows = 129;
  const auto gateUp = as<T>(randomVec(rows * 2 * cols, 5)), dy = as<T>(randomVec(rows * cols, 6));
  std::vector<T> y(rows * cols), dGateUp(gateUp.size());
  ref::swigluForward(gateUp.data(), y.data(), rows, cols);
  ref::swigluBackward(dy.data(), gateUp.data(), dGateUp.data(), rows, cols);
  DeviceVec<T> dGU(gateUp), dDy(dy), dY(y.size()), dDGU(gateUp.size());
  COLO_CUDA_OK(cuda::swigluForward(dGU.get(), dY.get(), rows, cols, nullptr));
  COLO_CUDA_OK(cuda::swigluBackward(dDy.get(), dGU.get(), dDGU.get(), rows, cols, nullptr));
  EXPECT_TRUE(near(floats(dY.back()), floats(y), tolerance<T>()));
  EXPECT_TRUE(near(floats(dDGU.back()), floats(dGateUp), tolerance<T>()));
  // The same on gate and up as two tensors.
  std::vector<T> gate(rows * cols), up(rows * cols);
  for (Index r = 0; r < rows; ++r) {
    for (Index c = 0; c < cols; ++c) {
      gate[r * cols + c] = gateUp[r * 2 * cols + c];
      up[r * cols + c] = gateUp[r * 2 * cols + cols + c];
    }
  }
  DeviceVec<T> dGate(gate), dUp(up), dY2(y.size()), dDGate(gate.size()), dDUp(up.size());
  COLO_CUDA_OK(cuda::swigluForwardSplit(dGate.get(), dUp.get(), dY2.get(), rows, cols, nullptr));
  COLO_CUDA_OK(cuda::swigluBackwardSplit(dDy.get(), dGate.get(), dUp.get(), dDGate.get(), dDUp.get(), rows, cols, nullptr));
  EXPECT_TRUE(near(floats(dY2.back()), floats(y), tolerance<T>()));
  const auto gotGate = floats(dDGate.back()), gotUp = floats(dDUp.back()), want = floats(dGateUp);
  Vec joined(want.size());
  for (Index r = 0; r < rows; ++r) {
    for (Index c = 0; c < cols; ++c) {
      joined[r * 2 * cols + c] = gotGate[r * cols + c];
      joined[r * 2 * cols + cols + c] = gotUp[r * cols + c];
    }
  }
  EXPECT_TRUE(near(joined, want, tolerance<T>()));

  const auto x = as<T>(randomVec(rows * cols, 7)), bias = as<T>(randomVec(cols, 8));
  std::vector<T> dx(x.size());
  Vec db(cols);
  ref::biasGeluForward(x.data(), bias.data(), y.data(), rows, cols);
  ref::biasGeluBackward(dy.data(), x.data(), bias.data(), dx.data(), db.data(), rows, cols);
  DeviceVec<T> dX(x), dBias(bias), dDx(x.size());
  DeviceVec<float> dDb(cols);
  COLO_CUDA_OK(cuda::biasGeluForward(dX.get(), dBias.get(), dY.get(), rows, cols, nullptr));
  COLO_CUDA_OK(cuda::biasGeluBackward(dDy.get(), dX.get(), dBias.get(), dDx.get(), dDb.get(), rows, cols, nullptr));
  EXPECT_TRUE(near(floats(dY.back()), floats(y), tolerance<T>()));
  EXPECT_TRUE(near(floats(dDx.back()), floats(dx), tolerance<T>()));
  EXPECT_TRUE(near(dDb.back(), db, 1e-4f));

  const Index tokens = 17, heads = 3, dim = 64;
  const auto q = as<T>(randomVec(tokens * heads * dim, 9));
  const Vec cos = randomVec(tokens * dim / 2, 10), sin = randomVec(tokens * dim / 2, 11);
  std::vector<T> rq(q.size()), back(q.size());
  ref::rotaryForward(q.data(), cos.data(), sin.data(), rq.data(), tokens, heads, dim);
  ref::rotaryBackward(q.data(), cos.data(), sin.data(), back.data(), tokens, heads, dim);
  DeviceVec<T> dQ(q), dR(q.size()), dBack(q.size());
  DeviceVec<float> dCos(cos), dSin(sin);
  COLO_CUDA_OK(cuda::rotaryForward(dQ.get(), dCos.get(), dSin.get(), dR.get(), tokens, heads, dim, nullptr));
  COLO_CUDA_OK(cuda::rotaryBackward(dQ.get(), dCos.get(), dSin.get(), dBack.get(), tokens, heads, dim, nullptr));
  EXPECT_TRUE(near(floats(dR.back()), floats(rq), tolerance<T>()));
  EXPECT_TRUE(near(floats(dBack.back()), floats(back), tolerance<T>()));
}

TYPED_TEST(CudaKernels, CrossEntropyShardMatchesTheReference) {
  using T = TypeParam;
  COLO_SKIP_WITHOUT_GPU();
  const Index rows = 19, vocab = 5003, start = 5003;  // the second of two shards
  Vec raw = randomVec(rows * vocab, 12, 4.0f);
  for (Index v = 0; v < vocab; v += 7) raw[v] = -std::numeric_limits<float>::infinity();  // masked logits in row 0
  for (Index v = 0; v < vocab; ++v) raw[vocab + v] = -std::numeric_limits<float>::infinity();  // row 1: all masked here
  const auto logits = as<T>(raw);
  std::vector<Index> targets(rows);
  for (Index r = 0; r < rows; ++r) targets[r] = r % 3 == 0 ? -100 : (r * 977) % (2 * vocab);
  Vec mx(rows), se(rows), tl(rows), lse(rows), grad(rows, 1.0f / rows);
  ref::crossEntropyShardStats(logits.data(), targets.data(), start, mx.data(), se.data(), tl.data(), rows, vocab);
  // A row whose shard is all masked takes its log-sum-exp from the other shard (here: 0).
  for (Index r = 0; r < rows; ++r) lse[r] = std::isfinite(mx[r]) ? mx[r] + std::log(se[r]) : 0.0f;
  std::vector<T> d(logits.size());
  ref::crossEntropyShardBackward(logits.data(), targets.data(), start, lse.data(), grad.data(), d.data(), rows, vocab);
  DeviceVec<T> dL(logits), dD(logits.size());
  DeviceVec<Index> dT(targets);
  DeviceVec<float> dMx(rows), dSe(rows), dTl(rows), dLse(lse), dGrad(grad);
  COLO_CUDA_OK(cuda::crossEntropyShardStats(dL.get(), dT.get(), start, dMx.get(), dSe.get(), dTl.get(), rows, vocab, nullptr));
  COLO_CUDA_OK(cuda::crossEntropyShardBackward(dL.get(), dT.get(), start, dLse.get(), dGrad.get(), dD.get(), rows, vocab, nullptr));
  const Vec gotMax = dMx.back();
  for (Index r = 0; r < rows; ++r) EXPECT_TRUE(gotMax[r] == mx[r]) << "row " << r << ": " << gotMax[r] << " vs " << mx[r];
  EXPECT_TRUE(near(dSe.back(), se, 1e-4f));
  EXPECT_TRUE(near(dTl.back(), tl, 0.0f));
  EXPECT_TRUE(near(floats(dD.back()), floats(d), std::is_same_v<T, bf16> ? 1e-3f : 1e-6f));
}

TYPED_TEST(CudaKernels, MultiTensorOptimizersMatchTheReference) {
  using G = TypeParam;
  COLO_SKIP_WITHOUT_GPU();
  // 40 tensors: more than one launch group.
  std::vector<Vec> params, moms, sqs;
  std::vector<std::vector<G>> grads;
  for (int k = 0; k < 40; ++k) {
    // One tensor past 1024 blocks of 256 (the grid-stride loop), the others small.
    const auto n = static_cast<std::size_t>(k == 5 ? 300000 : 1 + 97 * k);
    params.push_back(randomVec(n, 100 + k));
    grads.push_back(as<G>(randomVec(n, 200 + k)));
    moms.push_back(randomVec(n, 300 + k, 0.01f));
    Vec v = randomVec(n, 400 + k, 0.01f);
    for (auto& e : v) e = e * e;
    sqs.push_back(v);
  }
  for (const bool lamb : {false, true}) {
    std::vector<Vec> hp = params, hm = moms, hv = sqs;
    std::vector<std::unique_ptr<DeviceVec<float>>> dp, dm, dv;
    std::vector<std::unique_ptr<DeviceVec<G>>> dg;
    std::vector<std::unique_ptr<DeviceVec<bf16>>> dc;
    std::vector<ref::FlatTensor<G>> host, device;
    for (std::size_t k = 0; k < params.size(); ++k) {
      host.push_back({hp[k].data(), grads[k].data(), hm[k].data(), hv[k].data(), nullptr, static_cast<Index>(hp[k].size())});
      dp.push_back(std::make_unique<DeviceVec<float>>(params[k]));
      dm.push_back(std::make_unique<DeviceVec<float>>(moms[k]));
      dv.push_back(std::make_unique<DeviceVec<float>>(sqs[k]));
      dg.push_back(std::make_unique<DeviceVec<G>>(grads[k]));
      dc.push_back(std::make_unique<DeviceVec<bf16>>(params[k].size()));
      // Every third tensor without a bf16 copy.
      device.push_back({dp[k]->get(), dg[k]->get(), dm[k]->get(), dv[k]->get(), k % 3 == 2 ? nullptr : dc[k]->get(),
                        static_cast<Index>(hp[k].size())});
    }
    if (lamb) {
      ref::LambConfig c;
      c.step = 3;
      ref::lambStep<G>(host, c, 0.5f);
      DeviceVec<float> scratch(static_cast<std::size_t>(cuda::lambScratchFloats(device.size())));
      COLO_CUDA_OK(cuda::lambStep<G>(device, c, 0.5f, scratch.get(), nullptr));
    } else {
      ref::AdamWConfig c;
      c.step = 3;
      ref::adamwStep<G>(host, c, 0.5f);
      COLO_CUDA_OK(cuda::adamwStep<G>(device, c, 0.5f, nullptr));
    }
    for (std::size_t k = 0; k < params.size(); ++k) {
      EXPECT_TRUE(near(dp[k]->back(), hp[k], 1e-5f)) << (lamb ? "LAMB" : "AdamW") << " tensor " << k;
      EXPECT_TRUE(near(dm[k]->back(), hm[k], 1e-6f));
      EXPECT_TRUE(near(dv[k]->back(), hv[k], 1e-6f));
      if (k % 3 != 2) {
        EXPECT_TRUE(near(floats(dc[k]->back()), toFloats(toBf16(hp[k])), 1.0f / 128));
      }
    }
  }
}

// The gradient norm's reduction on the device equals the CPU reference (both fp64 sums, in different
// orders), adds into what `out` holds, gives the same bits when repeated, and leaves out alone for n = 0.
// One scratch serves every call, largest first, so a second pass that read partial sums beyond its own
// blocks would add the previous call's.
template <class T>
void checkSumOfSquares() {
  DeviceVec<double> scratch(static_cast<std::size_t>(cuda::sumOfSquaresScratch()));
  for (const Index n : {Index{(1 << 22) + 7}, Index{300000}, Index{1003}, Index{1}}) {
    const auto host = as<T>(randomVec(static_cast<std::size_t>(n), 500u + static_cast<unsigned>(n % 97)));
    double expected = 2.0;
    ref::addSumOfSquares(host.data(), n, &expected);
    DeviceVec<T> x(host);
    DeviceVec<double> out(std::vector<double>{2.0});
    COLO_CUDA_OK(cuda::addSumOfSquares(x.get(), n, scratch.get(), out.get(), nullptr));
    const double first = out.back()[0];
    EXPECT_NEAR(first, expected, 1e-12 * expected) << "n " << n;
    DeviceVec<double> again(std::vector<double>{2.0});
    COLO_CUDA_OK(cuda::addSumOfSquares(x.get(), n, scratch.get(), again.get(), nullptr));
    EXPECT_EQ(again.back()[0], first) << "n " << n;
    COLO_CUDA_OK(cuda::addSumOfSquares(x.get(), 0, scratch.get(), again.get(), nullptr));
    EXPECT_EQ(again.back()[0], first);
  }
}

TEST(CudaKernels, SumOfSquaresEqualsTheReferenceAndRepeatsExactly) {
  COLO_SKIP_WITHOUT_GPU();
  checkSumOfSquares<float>();
  checkSumOfSquares<bf16>();
}

TEST(CudaKernels, EventTimerMeasuresWorkOnTheStream) {
  COLO_SKIP_WITHOUT_GPU();
  cuda::EventTimer timer;
  const std::size_t n = 1 << 24;
  DeviceVec<float> a(n), b(n);
  COLO_CUDA_OK(timer.start());
  for (int i = 0; i < 10; ++i) cudaMemcpyAsync(b.get(), a.get(), n * sizeof(float), cudaMemcpyDeviceToDevice, nullptr);
  COLO_CUDA_OK(timer.stop());
  const float ms = timer.milliseconds();
  EXPECT_GT(ms, 0.0f);
  EXPECT_LT(ms, 1000.0f);
  EXPECT_NE(cuda::describeDevice(0).find("sm_"), std::string::npos);
}

}  // namespace
}  // namespace colo::kernels
