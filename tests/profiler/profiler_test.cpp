// The profiler against a real LibTorch on this machine and a real SQLite file. Functional checks only:
// speed and accuracy figures come from `colo-profile check` and bench/, not from timed tests.
#include "colo/profiler/profiler.h"

#include <map>
#include <set>

#include <gtest/gtest.h>

#include "colo/costmodel/evaluator.h"
#include "core/test_support.h"

namespace colo::profiler {
namespace {

class CancelAfter : public ProgressSink {
 public:
  CancelAfter(CancellationToken& token, int calls) : m_token(token), m_left(calls) {}
  void progress(double, std::string_view) override {
    if (--m_left == 0) m_token.cancel();
  }

 private:
  CancellationToken& m_token;
  int m_left;
};

ProfileOptions quick() {
  ProfileOptions o;
  o.microBatches = {1};
  o.seqLen = 64;
  o.warmup = 1;
  o.repetitions = 2;
  o.batchRows = 2;
  return o;
}

TEST(Profiler, GemmTimingIsPositiveAndBatchedPerGemm) {
  auto one = timeGemm(64, 64, 64, 1, DType::kFp32, "cpu", 1, 3);
  ASSERT_TRUE(one) << one.error().toString();
  EXPECT_GT(one->median, 0);
  EXPECT_EQ(one->repetitions, 3);
  auto batched = timeGemm(64, 64, 64, 8, DType::kFp32, "cpu", 1, 3);
  ASSERT_TRUE(batched);
  EXPECT_GT(batched->median, 0);
  EXPECT_FALSE(timeGemm(8, 8, 8, 1, DType::kFp8, "cpu", 0, 1));
  EXPECT_FALSE(timeGemm(8, 8, 8, 1, DType::kFp32, "tpu", 0, 1));
}

TEST(Profiler, ProfilesResumesAndSurvivesInterruption) {
  test::ScratchDir dir;
  const auto file = dir.path("cpu.sqlite");
  const Model model = test::loadModelOrFail(test::dataFile("models/tiny-gpt.json"));
  {
    auto db = costmodel::CostDatabase::openForWrite(file);
    ASSERT_TRUE(db);
    CancellationToken cancel;
    CancelAfter stopper(cancel, 3);  // stop after three measurements
    auto r = profileModel(model, *db, quick(), &stopper, &cancel);
    ASSERT_TRUE(r) << r.error().toString();
    EXPECT_TRUE(r->cancelled);
    EXPECT_LT(r->measured, r->shapes);
  }
  // What was measured before the interruption is in the file, which is valid.
  auto partial = costmodel::CostDatabase::open(file);
  ASSERT_TRUE(partial) << partial.error().toString();
  const auto name = deviceName("cpu");
  ASSERT_TRUE(name);
  const std::size_t before = partial->gemmsFor(*name).size();
  EXPECT_GE(before, 2u);

  auto db = costmodel::CostDatabase::openForWrite(file);
  ASSERT_TRUE(db);
  auto o = quick();
  o.resume = true;
  auto r = profileModel(model, *db, o);
  ASSERT_TRUE(r) << r.error().toString();
  EXPECT_FALSE(r->cancelled);
  EXPECT_EQ(static_cast<std::size_t>(r->skipped), before);
  EXPECT_EQ(r->measured + r->skipped, r->shapes);
  EXPECT_GT(r->kernels, 3);
  EXPECT_EQ(db->gemmsFor(*name).size(), static_cast<std::size_t>(r->shapes));
  EXPECT_FALSE(db->kernelsFor(*name).empty());

  // Everything the evaluator looks up for this plan is now measured.
  Plan p;
  p.model = model;
  p.cluster = test::loadClusterOrFail(test::dataFile("clusters/localhost-cpu.json"));
  p.seqLen = 64;
  p.globalBatchSize = 1;
  p.precision = DType::kFp32;
  p.execution.flashAttention = false;
  p.stages = uniformStages(4, 1, RecomputePolicy::kNone);
  auto ev = costmodel::evaluatePlan(p, &*db);
  ASSERT_TRUE(ev) << ev.error().toString();
  EXPECT_EQ(ev->gemmRoofline, 0);
  EXPECT_EQ(ev->gemmInterpolated, 0);
  EXPECT_GT(ev->kernelsMeasured, 0);
  EXPECT_EQ(ev->kernelsRoofline, 0);  // embedding included
  EXPECT_TRUE(ev->calibration.optimizerMeasured);
  std::set<std::string> ops;
  for (const auto& k : db->kernelsFor(*name)) ops.insert(k.op);
  for (const char* op : {"embedding.fwd", "embedding.bwd", "adam_step.fwd", "layernorm.bwd", "cross_entropy.fwd"}) {
    EXPECT_TRUE(ops.contains(op)) << op;
  }
}

TEST(Profiler, ResumeMeasuresAKernelWhoseStoredRowIsAnotherImplementation) {
  // A file whose kernel rows were all measured as another implementation than this device runs now
  // (LibTorch's where colo's kernel runs, or the other way round): --resume measures them again
  // instead of taking them as done, and keeps the GEMMs it has.
  test::ScratchDir dir;
  const Model model = test::loadModelOrFail(test::dataFile("models/tiny-gpt.json"));
  auto first = costmodel::CostDatabase::openForWrite(dir.path("first.sqlite"));
  ASSERT_TRUE(first);
  auto r1 = profileModel(model, *first, quick());
  ASSERT_TRUE(r1) << r1.error().toString();
  const auto name = r1->deviceName;
  std::vector<costmodel::KernelMeasurement> other = first->kernelsFor(name);
  ASSERT_FALSE(other.empty());
  for (auto& k : other) k.impl = "another implementation";
  auto second = costmodel::CostDatabase::openForWrite(dir.path("second.sqlite"));
  ASSERT_TRUE(second);
  ASSERT_TRUE(second->addGemms(name, first->gemmsFor(name), "torch"));
  ASSERT_TRUE(second->addKernels(name, other));
  auto o = quick();
  o.resume = true;
  auto r2 = profileModel(model, *second, o);
  ASSERT_TRUE(r2) << r2.error().toString();
  EXPECT_EQ(r2->measured, 0);                  // every GEMM was there
  EXPECT_EQ(r2->kernels, r1->kernels);         // every kernel measured again
  EXPECT_EQ(second->kernelsFor(name).size(), 2 * other.size());
  // Resumed once more, nothing is left to measure.
  auto r3 = profileModel(model, *second, o);
  ASSERT_TRUE(r3) << r3.error().toString();
  EXPECT_EQ(r3->kernels, 0);
}

// Profiles one of the test models into a scratch database; returns the report and each kernel's
// measured seconds by op name.
struct Profiled {
  ProfileReport report;
  std::map<std::string, double> seconds;
};
Profiled profiledKernels(const char* modelFile) {
  test::ScratchDir dir;
  const Model model = test::loadModelOrFail(test::dataFile(std::string("models/") + modelFile));
  auto db = costmodel::CostDatabase::openForWrite(dir.path("kernels.sqlite"));
  EXPECT_TRUE(db);
  if (!db) return {};
  auto r = profileModel(model, *db, quick());
  EXPECT_TRUE(r) << r.error().toString();
  if (!r) return {};
  Profiled out{*r, {}};
  for (const auto& k : db->kernelsFor(r->deviceName)) out.seconds[k.op] = k.seconds;
  return out;
}

TEST(Profiler, LlamaKernelsIncludeRotaryAndRmsNorm) {
  const Profiled p = profiledKernels("tiny-llama.json");
  EXPECT_EQ(p.report.copies, 0);  // a CPU has no host-device copies
  for (const char* op : {"rotary.fwd", "rotary.bwd", "rmsnorm.fwd", "swiglu.bwd", "adam_step.fwd"}) {
    EXPECT_TRUE(p.seconds.contains(op)) << op;
  }
}

TEST(Profiler, MoeKernelsIncludeTheTokenDispatchsPermutation) {
  const Profiled p = profiledKernels("tiny-moe.json");
  for (const char* op : {"permute.fwd", "permute.bwd"}) {
    ASSERT_TRUE(p.seconds.contains(op)) << op;
    EXPECT_GT(p.seconds.at(op), 0) << op;
  }
}

TEST(Profiler, ModelStepRunsForGptAndLlama) {
  for (const char* name : {"tiny-gpt", "tiny-llama"}) {
    const Model model = test::loadModelOrFail(test::dataFile(std::string("models/") + name + ".json"));
    auto t = timeModelStep(*model.spec, 32, 1, DType::kFp32, "cpu", 0, 1);
    ASSERT_TRUE(t) << name << ": " << t.error().toString();
    EXPECT_GT(t->median, 0);
  }
  const Model moe = test::loadModelOrFail(test::dataFile("models/mixtral-8x7b.json"));
  EXPECT_FALSE(timeModelStep(*moe.spec, 32, 1, DType::kFp32, "cpu", 0, 1));
}

}  // namespace
}  // namespace colo::profiler
