// The CPU references against finite differences, against each other (vocabulary shards), and bf16
// against fp32. These are what the CUDA kernels are checked against on a GPU, so they must be right.
#include <algorithm>
#include <cmath>
#include <limits>

#include "colo/kernels/reference.h"
#include "kernels_test_support.h"

namespace colo::kernels {
namespace {

using namespace test;
using ref::Index;

constexpr Index kRows = 3, kCols = 8;

TEST(KernelsBf16, RoundsToNearestEvenLikeTheHardware) {
  EXPECT_EQ(toBf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(toBf16(-2.0f).bits, 0xc000);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
  EXPECT_EQ(toBf16(1.0f + 1.0f / 256).bits, 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: to the even one, 1 + 2^-6.
  EXPECT_EQ(toBf16(1.0f + 3.0f / 256).bits, 0x3f82);
  EXPECT_EQ(toBf16(1.0f + 1.0f / 256 + 1.0f / 65536).bits, 0x3f81);  // above halfway: up
  EXPECT_TRUE(std::isnan(toFloat(toBf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(toFloat(toBf16(std::numeric_limits<float>::infinity())), std::numeric_limits<float>::infinity());
  EXPECT_EQ(toFloat(toBf16(std::numeric_limits<float>::max())), std::numeric_limits<float>::infinity());  // past bf16 max
  EXPECT_NEAR(toFloat(toBf16(3.0e38f)) / 3.0e38f, 1.0, 1.0 / 256);  // below bf16 max: kept, rounded
}

TEST(KernelsReference, RmsnormBackwardIsTheGradientOfItsForward) {
  const Vec x = randomVec(kRows * kCols, 1), w = randomVec(kCols, 2, 0.5f, 1.0f), dy = randomVec(kRows * kCols, 3);
  Vec rstd(kRows), dx(x.size()), dw(kCols);
  auto forward = [&](const Vec& xx, const Vec& ww) {
    Vec y(xx.size()), r(kRows);
    ref::rmsnormForward(xx.data(), ww.data(), y.data(), r.data(), kRows, kCols, 1e-5f);
    return y;
  };
  Vec y = forward(x, w);
  ref::rmsnormForward(x.data(), w.data(), y.data(), rstd.data(), kRows, kCols, 1e-5f);
  // 1/rms really normalizes: each row of x * rstd has mean square 1.
  for (Index r = 0; r < kRows; ++r) {
    double ms = 0;
    for (Index c = 0; c < kCols; ++c) ms += std::pow(x[r * kCols + c] * rstd[r], 2.0);
    EXPECT_NEAR(ms / kCols, 1.0, 1e-4);
  }
  ref::rmsnormBackward(dy.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), kRows, kCols);
  EXPECT_TRUE(near(dx, numericGrad(x, [&](const Vec& v) { return forward(v, w); }, dy), 5e-3f));
  EXPECT_TRUE(near(dw, numericGrad(w, [&](const Vec& v) { return forward(x, v); }, dy), 5e-3f));
}

TEST(KernelsReference, LayernormBackwardIsTheGradientOfItsForward) {
  const Vec x = randomVec(kRows * kCols, 4, 2.0f, 3.0f), w = randomVec(kCols, 5, 0.5f, 1.0f), b = randomVec(kCols, 6);
  const Vec dy = randomVec(kRows * kCols, 7);
  auto forward = [&](const Vec& xx, const Vec& ww, const Vec& bb) {
    Vec y(xx.size()), m(kRows), r(kRows);
    ref::layernormForward(xx.data(), ww.data(), bb.data(), y.data(), m.data(), r.data(), kRows, kCols, 1e-5f);
    return y;
  };
  Vec y(x.size()), mean(kRows), rstd(kRows), dx(x.size()), dw(kCols), db(kCols);
  ref::layernormForward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), kRows, kCols, 1e-5f);
  ref::layernormBackward(dy.data(), x.data(), w.data(), mean.data(), rstd.data(), dx.data(), dw.data(), db.data(), kRows, kCols);
  EXPECT_TRUE(near(dx, numericGrad(x, [&](const Vec& v) { return forward(v, w, b); }, dy), 5e-3f));
  EXPECT_TRUE(near(dw, numericGrad(w, [&](const Vec& v) { return forward(x, v, b); }, dy), 5e-3f));
  EXPECT_TRUE(near(db, numericGrad(b, [&](const Vec& v) { return forward(x, w, v); }, dy), 5e-3f));
}

TEST(KernelsReference, SwigluAndBiasGeluBackwardsAreTheGradientsOfTheirForwards) {
  const Vec gateUp = randomVec(kRows * 2 * kCols, 8), dy = randomVec(kRows * kCols, 9);
  auto swiglu = [&](const Vec& v) {
    Vec y(kRows * kCols);
    ref::swigluForward(v.data(), y.data(), kRows, kCols);
    return y;
  };
  Vec dGateUp(gateUp.size());
  ref::swigluBackward(dy.data(), gateUp.data(), dGateUp.data(), kRows, kCols);
  EXPECT_TRUE(near(dGateUp, numericGrad(gateUp, swiglu, dy), 2e-3f));
  // silu(g) * u at a known point: g = 1, u = 2 gives 2 / (1 + e^-1).
  const Vec one{1.0f, 2.0f};
  Vec y1(1);
  ref::swigluForward(one.data(), y1.data(), 1, 1);
  EXPECT_NEAR(y1[0], 2.0 / (1.0 + std::exp(-1.0)), 1e-6);

  const Vec x = randomVec(kRows * kCols, 10), bias = randomVec(kCols, 11);
  auto gelu = [&](const Vec& xx, const Vec& bb) {
    Vec y(xx.size());
    ref::biasGeluForward(xx.data(), bb.data(), y.data(), kRows, kCols);
    return y;
  };
  Vec dx(x.size()), db(kCols);
  ref::biasGeluBackward(dy.data(), x.data(), bias.data(), dx.data(), db.data(), kRows, kCols);
  EXPECT_TRUE(near(dx, numericGrad(x, [&](const Vec& v) { return gelu(v, bias); }, dy), 2e-3f));
  EXPECT_TRUE(near(db, numericGrad(bias, [&](const Vec& v) { return gelu(x, v); }, dy), 2e-3f));
}

TEST(KernelsReference, RotaryTurnsPairsAndItsBackwardTurnsThemBack) {
  constexpr Index tokens = 3, heads = 2, dim = 4;
  const Vec x = randomVec(tokens * heads * dim, 12);
  Vec cos(tokens * dim / 2), sin(cos.size());
  for (Index t = 0; t < tokens; ++t) {
    for (Index i = 0; i < dim / 2; ++i) {
      const double angle = static_cast<double>(t) / std::pow(10000.0, 2.0 * static_cast<double>(i) / dim);
      cos[t * dim / 2 + i] = static_cast<float>(std::cos(angle));
      sin[t * dim / 2 + i] = static_cast<float>(std::sin(angle));
    }
  }
  Vec y(x.size()), back(x.size());
  ref::rotaryForward(x.data(), cos.data(), sin.data(), y.data(), tokens, heads, dim);
  // Token 0 has angle 0: unchanged. A rotation keeps every pair's length.
  for (Index i = 0; i < heads * dim; ++i) EXPECT_FLOAT_EQ(y[i], x[i]);
  for (Index p = 0; p < tokens * heads; ++p) {
    for (Index i = 0; i < dim / 2; ++i) {
      const float a = std::hypot(x[p * dim + i], x[p * dim + i + dim / 2]), b = std::hypot(y[p * dim + i], y[p * dim + i + dim / 2]);
      EXPECT_NEAR(a, b, 1e-5);
    }
  }
  ref::rotaryBackward(y.data(), cos.data(), sin.data(), back.data(), tokens, heads, dim);
  EXPECT_TRUE(near(back, x, 1e-6f));
  const Vec dy = randomVec(x.size(), 13);
  Vec dx(x.size());
  ref::rotaryBackward(dy.data(), cos.data(), sin.data(), dx.data(), tokens, heads, dim);
  auto f = [&](const Vec& v) {
    Vec out(v.size());
    ref::rotaryForward(v.data(), cos.data(), sin.data(), out.data(), tokens, heads, dim);
    return out;
  };
  EXPECT_TRUE(near(dx, numericGrad(x, f, dy), 1e-3f));
}

// Loss and logits gradient from `shards` equal vocabulary shards, combined as the executor does.
struct CrossEntropyResult {
  Vec loss, dlogits;
};
CrossEntropyResult shardedCrossEntropy(const Vec& logits, const std::vector<Index>& targets, Index rows, Index vocab, Index shards,
                                       const Vec& gradLoss) {
  const Index part = vocab / shards;
  std::vector<Vec> pieces(static_cast<std::size_t>(shards)), maxes(pieces.size(), Vec(rows)), sums(maxes), picks(maxes);
  for (Index k = 0; k < shards; ++k) {
    Vec& piece = pieces[static_cast<std::size_t>(k)];
    for (Index r = 0; r < rows; ++r) piece.insert(piece.end(), logits.begin() + r * vocab + k * part, logits.begin() + r * vocab + (k + 1) * part);
    ref::crossEntropyShardStats(piece.data(), targets.data(), k * part, maxes[static_cast<std::size_t>(k)].data(),
                                sums[static_cast<std::size_t>(k)].data(), picks[static_cast<std::size_t>(k)].data(), rows, part);
  }
  std::vector<const float*> m, s, t;
  for (Index k = 0; k < shards; ++k) {
    m.push_back(maxes[static_cast<std::size_t>(k)].data());
    s.push_back(sums[static_cast<std::size_t>(k)].data());
    t.push_back(picks[static_cast<std::size_t>(k)].data());
  }
  CrossEntropyResult out{Vec(rows), Vec(logits.size())};
  Vec lse(rows);
  ref::crossEntropyCombine(m, s, t, targets.data(), lse.data(), out.loss.data(), rows);
  for (Index k = 0; k < shards; ++k) {
    Vec d(static_cast<std::size_t>(rows * part));
    ref::crossEntropyShardBackward(pieces[static_cast<std::size_t>(k)].data(), targets.data(), k * part, lse.data(), gradLoss.data(),
                                   d.data(), rows, part);
    for (Index r = 0; r < rows; ++r) std::copy_n(d.begin() + r * part, part, out.dlogits.begin() + r * vocab + k * part);
  }
  return out;
}

TEST(KernelsReference, VocabularyParallelCrossEntropyEqualsTheWholeVocabularyAndItsGradient) {
  constexpr Index rows = 4, vocab = 12;
  const Vec logits = randomVec(rows * vocab, 14, 3.0f);
  const std::vector<Index> targets{0, 5, 11, -100};  // the last row is ignored
  const Vec gradLoss{0.25f, 0.25f, 0.25f, 0.25f};
  // The loss by the book, in double: log-sum-exp minus the target's logit.
  for (const Index shards : {Index{1}, Index{2}, Index{3}, Index{4}}) {
    const auto got = shardedCrossEntropy(logits, targets, rows, vocab, shards, gradLoss);
    for (Index r = 0; r < rows; ++r) {
      double sum = 0;
      for (Index v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(logits[r * vocab + v]));
      const double expected = targets[r] < 0 ? 0.0 : std::log(sum) - logits[r * vocab + targets[r]];
      EXPECT_NEAR(got.loss[r], expected, 1e-5) << shards << " shards, row " << r;
    }
    for (Index v = 0; v < vocab; ++v) EXPECT_EQ(got.dlogits[3 * vocab + v], 0.0f) << "ignored row";
    auto meanLoss = [&](const Vec& l) {
      const auto r = shardedCrossEntropy(l, targets, rows, vocab, shards, gradLoss);
      return Vec{0.25f * (r.loss[0] + r.loss[1] + r.loss[2] + r.loss[3])};
    };
    EXPECT_TRUE(near(got.dlogits, numericGrad(logits, meanLoss, Vec{1.0f}, 1e-2f), 2e-3f)) << shards << " shards";
  }
  // Masked logits (-inf, as a padded vocabulary gives) add nothing, wherever they come in the row; a shard
  // with nothing but masked logits contributes a zero sum.
  const float inf = std::numeric_limits<float>::infinity();
  const Vec masked{-inf, 1.0f, 2.0f, -inf, -inf, -inf};
  const auto m = shardedCrossEntropy(masked, {2}, 1, 6, 2, {1.0f});
  EXPECT_NEAR(m.loss[0], std::log(std::exp(1.0) + std::exp(2.0)) - 2.0, 1e-6);
  EXPECT_EQ(m.dlogits[0], 0.0f);
  EXPECT_EQ(m.dlogits[4], 0.0f);
  // Logits far beyond exp's range stay finite (the max is subtracted first).
  Vec huge(vocab, 1.0e4f);
  huge[3] = 1.0e4f + 1.0f;
  const auto big = shardedCrossEntropy(huge, {3}, 1, vocab, 2, {1.0f});
  EXPECT_NEAR(big.loss[0], std::log(11.0 + std::exp(1.0)) - 1.0, 1e-3);
}

TEST(KernelsReference, Bf16KernelsFollowTheirFp32ReferencesWithinBf16Rounding) {
  const Vec x = randomVec(kRows * kCols, 15), w = randomVec(kCols, 16, 0.5f, 1.0f);
  Vec y32(x.size()), r32(kRows);
  ref::rmsnormForward(x.data(), w.data(), y32.data(), r32.data(), kRows, kCols, 1e-5f);
  const auto xb = toBf16(x), wb = toBf16(w);
  std::vector<bf16> yb(x.size());
  Vec rb(kRows);
  ref::rmsnormForward(xb.data(), wb.data(), yb.data(), rb.data(), kRows, kCols, 1e-5f);
  EXPECT_TRUE(near(toFloats(yb), y32, 3.0f / 128));  // inputs and output each rounded once (2^-8 each)

  const Vec gateUp = randomVec(kRows * 2 * kCols, 17);
  Vec s32(kRows * kCols);
  ref::swigluForward(gateUp.data(), s32.data(), kRows, kCols);
  const auto gb = toBf16(gateUp);
  std::vector<bf16> sb(s32.size());
  ref::swigluForward(gb.data(), sb.data(), kRows, kCols);
  EXPECT_TRUE(near(toFloats(sb), s32, 3.0f / 128));
}

// The gradient norm's reduction: squares summed in fp64 (4096^2 + 0.001^2 keeps its 1e-6, which an fp32
// sum would round away), added to what `out` holds; bf16 inputs widened exactly.
TEST(KernelsReference, SumOfSquaresAccumulatesInFp64IntoOut) {
  const Vec x{4096.0f, 0.001f, -3.0f};
  double out = 10.0;
  ref::addSumOfSquares(x.data(), 2, &out);
  const double small = static_cast<double>(x[1]) * static_cast<double>(x[1]);
  EXPECT_DOUBLE_EQ(out, 10.0 + 16777216.0 + small);
  EXPECT_GT(out, 16777226.0);
  ref::addSumOfSquares(x.data() + 2, 1, &out);
  ref::addSumOfSquares(x.data(), 0, &out);
  EXPECT_DOUBLE_EQ(out, 10.0 + 16777216.0 + small + 9.0);
  const auto xb = toBf16(Vec{0.5f, -1.5f});
  double outB = 0;
  ref::addSumOfSquares(xb.data(), 2, &outB);
  EXPECT_DOUBLE_EQ(outB, 0.25 + 2.25);
}

TEST(KernelsReference, AdamwAndLambStepTheFormulasOnEveryTensorOfTheList) {
  Vec p1{1.0f, -2.0f, 0.5f}, g1{0.1f, 0.2f, -0.3f}, m1(3, 0.0f), v1(3, 0.0f);
  Vec p2{3.0f}, g2{-1.0f}, m2{0.5f}, v2{0.25f};
  std::vector<bf16> copy1(3);
  const std::vector<ref::FlatTensor<float>> list{{p1.data(), g1.data(), m1.data(), v1.data(), copy1.data(), 3},
                                                 {p2.data(), g2.data(), m2.data(), v2.data(), nullptr, 1}};
  const Vec p1Before = p1, p2Before = p2;
  ref::AdamWConfig c;
  c.lr = 0.1f;
  c.weightDecay = 0.1f;
  c.step = 2;
  ref::adamwStep<float>(list, c, 0.5f);
  auto adam = [&](double p, double g, double m, double v, double& mOut, double& vOut) {
    g *= 0.5;
    mOut = 0.9 * m + 0.1 * g;
    vOut = 0.999 * v + 0.001 * g * g;
    const double mhat = mOut / (1 - 0.81), vhat = vOut / (1 - 0.999 * 0.999);
    return p - 0.1 * (mhat / (std::sqrt(vhat) + 1e-8) + 0.1 * p);
  };
  for (int i = 0; i < 3; ++i) {
    double m, v;
    EXPECT_NEAR(p1[i], adam(p1Before[i], g1[i], 0, 0, m, v), 1e-5);
    EXPECT_NEAR(m1[i], m, 1e-7);
    EXPECT_NEAR(v1[i], v, 1e-9);
    EXPECT_EQ(copy1[i].bits, toBf16(p1[i]).bits);
  }
  double m, v;
  EXPECT_NEAR(p2[0], adam(p2Before[0], -1.0, 0.5, 0.25, m, v), 1e-5);

  // LAMB on one tensor: the Adam direction u = mhat / (sqrt(vhat) + eps) + wd p, scaled by ||p|| / ||u||.
  Vec p{3.0f, 4.0f}, g{1.0f, -1.0f}, mm(2, 0.0f), vv(2, 0.0f);
  const std::vector<ref::FlatTensor<float>> one{{p.data(), g.data(), mm.data(), vv.data(), nullptr, 2}};
  ref::LambConfig l;
  l.lr = 0.01f;
  l.weightDecay = 0.0f;
  l.eps = 0.0f;
  ref::lambStep<float>(one, l, 1.0f);
  // Step 1 with no decay: u = sign(g) (|mhat| = |g|, sqrt(vhat) = |g|), ||u|| = sqrt 2, ||p|| = 5.
  const double trust = 5.0 / std::sqrt(2.0);
  EXPECT_NEAR(p[0], 3.0 - 0.01 * trust, 1e-5);
  EXPECT_NEAR(p[1], 4.0 + 0.01 * trust, 1e-5);
}

}  // namespace
}  // namespace colo::kernels
