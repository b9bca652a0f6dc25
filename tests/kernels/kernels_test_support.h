#pragma once
// Helpers of the kernels tests: random buffers, finite differences, closeness.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "colo/kernels/bf16.h"

namespace colo::kernels::test {

using Vec = std::vector<float>;

inline Vec randomVec(std::size_t n, unsigned seed, float scale = 1.0f, float offset = 0.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  Vec v(n);
  for (auto& x : v) x = offset + scale * d(gen);
  return v;
}

inline std::vector<bf16> toBf16(const Vec& v) {
  std::vector<bf16> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = kernels::toBf16(v[i]);
  return out;
}

inline Vec toFloats(const std::vector<bf16>& v) {
  Vec out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = kernels::toFloat(v[i]);
  return out;
}

/// d/dx of sum(weights * f(x)) by central differences (double accumulation).
inline Vec numericGrad(const Vec& x, const std::function<Vec(const Vec&)>& f, const Vec& weights, float h = 1e-2f) {
  Vec grad(x.size());
  Vec probe = x;
  auto loss = [&](const Vec& at) {
    const Vec y = f(at);
    double sum = 0;
    for (std::size_t i = 0; i < y.size(); ++i) sum += static_cast<double>(weights[i]) * y[i];
    return sum;
  };
  for (std::size_t i = 0; i < x.size(); ++i) {
    probe[i] = x[i] + h;
    const double up = loss(probe);
    probe[i] = x[i] - h;
    const double down = loss(probe);
    probe[i] = x[i];
    grad[i] = static_cast<float>((up - down) / (2.0 * h));
  }
  return grad;
}

/// Every |a - b| <= tolerance * max(1, max |b|).
inline ::testing::AssertionResult near(const Vec& a, const Vec& b, float tolerance) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes " << a.size() << " and " << b.size();
  float scale = 1.0f;
  for (float x : b) scale = std::max(scale, std::abs(x));
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!(std::abs(a[i] - b[i]) <= tolerance * scale)) {
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i] << " (tolerance " << tolerance * scale << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace colo::kernels::test
