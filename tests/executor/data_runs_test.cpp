// The executor's parts that need no LibTorch: token files, the byte tokenizer, the runs database, the
// launcher environment and the pre-flight check of plans.
#include <cstdlib>
#include <fstream>

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "colo/executor/data.h"
#include "colo/core/runnable.h"
#include "colo/executor/executor.h"
#include "colo/executor/runs_db.h"
#include "core/test_support.h"

namespace colo::executor {
namespace {

void writeBytes(const std::string& file, const std::vector<unsigned char>& bytes) {
  std::ofstream out(file, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

TEST(TokenData, FlatFilesAreLittleEndianAndSamplingIsDeterministic) {
  test::ScratchDir dir;
  const auto u16 = dir.path("t.u16");
  writeBytes(u16, {1, 0, 0x34, 0x12, 7, 0, 8, 0, 9, 0});
  auto d = TokenData::open(u16);
  ASSERT_TRUE(d) << d.error().toString();
  EXPECT_EQ(d->size(), 5);
  EXPECT_EQ(d->token(1), 0x1234u);
  EXPECT_EQ(d->maxToken(), 0x1234u);
  const auto u32 = dir.path("t.u32");
  writeBytes(u32, {1, 0, 0, 0, 0x78, 0x56, 0x34, 0x12});
  auto e = TokenData::open(u32);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->token(1), 0x12345678u);
  // Same (seed, step, sample): same window; another sample or seed moves it.
  std::vector<unsigned char> many;
  for (int i = 0; i < 5000; ++i) {
    many.push_back(static_cast<unsigned char>(i % 251));
    many.push_back(0);
  }
  writeBytes(dir.path("m.u16"), many);
  auto m = TokenData::open(dir.path("m.u16"));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->sample(1, 3, 5, 16), m->sample(1, 3, 5, 16));
  EXPECT_EQ(m->sample(1, 3, 5, 16).size(), 17u);
  EXPECT_NE(m->sampleStart(1, 3, 5, 16), m->sampleStart(1, 3, 6, 16));
  EXPECT_NE(m->sampleStart(1, 3, 5, 16), m->sampleStart(2, 3, 5, 16));
}

TEST(TokenData, MegatronIndexedDatasetIsReadThroughItsIndex) {
  test::ScratchDir dir;
  // An index of one uint16 sequence of three tokens: magic, version 1, dtype code 8 (uint16), counts.
  std::vector<unsigned char> idx{'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 8};
  for (int i = 0; i < 8; ++i) idx.push_back(i == 0 ? 1 : 0);  // sequences
  for (int i = 0; i < 8; ++i) idx.push_back(i == 0 ? 2 : 0);  // documents
  writeBytes(dir.path("c.idx"), idx);
  writeBytes(dir.path("c.bin"), {5, 0, 6, 0, 7, 0});
  auto d = TokenData::open(dir.path("c.bin"));
  ASSERT_TRUE(d) << d.error().toString();
  EXPECT_EQ(d->size(), 3);
  EXPECT_EQ(d->tokenBytes(), 2);
  EXPECT_EQ(d->token(2), 7u);
  idx[0] = 'X';
  writeBytes(dir.path("c.idx"), idx);
  auto bad = TokenData::open(dir.path("c.bin"));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("MMIDIDX"), std::string::npos);
}

TEST(TokenData, BadFilesGetOneClearError) {
  test::ScratchDir dir;
  EXPECT_EQ(TokenData::open(dir.path("missing.u16")).error().code, ErrorCode::kIo);
  const auto txt = dir.write("corpus.txt", "hello");
  auto wrongType = TokenData::open(txt);
  ASSERT_FALSE(wrongType);
  EXPECT_NE(wrongType.error().message.find("colo-run prepare"), std::string::npos);
  writeBytes(dir.path("odd.u16"), {1, 0, 2});
  auto odd = TokenData::open(dir.path("odd.u16"));
  ASSERT_FALSE(odd);
  EXPECT_EQ(odd.error().code, ErrorCode::kBadInput);
  EXPECT_NE(odd.error().toString().find("odd.u16"), std::string::npos);
}

TEST(Prepare, ByteLevelTokensRoundTrip) {
  test::ScratchDir dir;
  const auto text = dir.write("a.txt", "Ab\xff");
  auto r = prepareTokens(text, dir.path("a.u16"));
  ASSERT_TRUE(r) << r.error().toString();
  EXPECT_EQ(r->tokens, 3);
  auto d = TokenData::open(dir.path("a.u16"));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->token(0), static_cast<std::uint64_t>('A'));
  EXPECT_EQ(d->token(2), 255u);
  EXPECT_FALSE(prepareTokens(text, dir.path("a.bin")));
  EXPECT_EQ(prepareTokens(dir.path("none.txt"), dir.path("b.u16")).error().code, ErrorCode::kIo);
}

RunResult sampleRun() {
  RunResult r;
  r.planName = "p";
  r.planHash = "abc";
  r.model = "tiny-gpt";
  r.device = "cpu";
  r.backend = "gloo";
  r.world = 4;
  r.tp = 2;
  r.dp = 2;
  r.losses = {8.0, 7.5, 7.25};
  r.stepSeconds = {0.5, 0.25, 0.25};
  r.gradNorms = {3, 2, 1};
  r.stepTimeSeconds = 0.25;
  r.tokensPerSecond = 1000;
  r.peakMemoryBytes = 1e8;
  r.predictedStepTimeSeconds = 0.2;
  r.predictedPeakMemoryBytes = 8e7;
  return r;
}

TEST(RunsDatabase, RecordsRunsAndStepsAndRefusesForeignFiles) {
  test::ScratchDir dir;
  const auto file = dir.path("runs.sqlite");
  {
    auto db = RunsDatabase::open(file);
    ASSERT_TRUE(db) << db.error().toString();
    auto id = db->add(sampleRun());
    ASSERT_TRUE(id) << id.error().toString();
    EXPECT_EQ(*id, 1);
  }
  auto db = RunsDatabase::open(file);
  ASSERT_TRUE(db);
  ASSERT_TRUE(db->add(sampleRun()));
  const auto runs = db->runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].result.losses, sampleRun().losses);
  EXPECT_EQ(runs[1].result.tp, 2);
  EXPECT_DOUBLE_EQ(runs[0].result.predictedStepTimeSeconds, 0.2);
  const auto foreign = dir.write("foreign.sqlite", std::string(3000, 'x'));
  auto refused = RunsDatabase::open(foreign);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kBadInput);
  std::ifstream in(foreign);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, std::string(3000, 'x'));
}

TEST(RunsDatabase, KeepsEachRunsPlanAndBringsAVersionOneFileForwardInOneTransaction) {
  test::ScratchDir dir;
  const auto file = dir.path("v1.sqlite");
  // A file as schema version 1 wrote it: no plan, no tensor memory.
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
    const char* v1 = R"sql(
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs(
  id INTEGER PRIMARY KEY,
  started_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
  plan_name TEXT NOT NULL, plan_hash TEXT NOT NULL, model TEXT NOT NULL, device TEXT NOT NULL, backend TEXT NOT NULL,
  world INTEGER NOT NULL, tp INTEGER NOT NULL, pp INTEGER NOT NULL, dp INTEGER NOT NULL, vpp INTEGER NOT NULL,
  first_step INTEGER NOT NULL, tokens_per_step INTEGER NOT NULL,
  step_time_s REAL NOT NULL, tokens_per_s REAL NOT NULL, peak_memory_bytes REAL NOT NULL,
  predicted_step_time_s REAL NOT NULL, predicted_peak_memory_bytes REAL NOT NULL,
  compute_s REAL NOT NULL, wall_s REAL NOT NULL, checkpoint TEXT NOT NULL DEFAULT '');
CREATE TABLE steps(run_id INTEGER NOT NULL REFERENCES runs(id), step INTEGER NOT NULL, loss REAL NOT NULL,
  seconds REAL NOT NULL, grad_norm REAL NOT NULL, PRIMARY KEY (run_id, step));
INSERT INTO meta VALUES ('format', 'colo.runs'), ('schema_version', '1');
INSERT INTO runs(plan_name, plan_hash, model, device, backend, world, tp, pp, dp, vpp, first_step, tokens_per_step,
  step_time_s, tokens_per_s, peak_memory_bytes, predicted_step_time_s, predicted_peak_memory_bytes, compute_s, wall_s)
  VALUES ('old', 'h', 'tiny-gpt', 'cpu', 'gloo', 2, 2, 1, 1, 1, 0, 512, 0.3, 1700, 1e9, 0.2, 9e8, 0.5, 1.0);
)sql";
    ASSERT_EQ(sqlite3_exec(db, v1, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  }
  {
    auto db = RunsDatabase::open(file);
    ASSERT_TRUE(db) << db.error().toString();
    auto runs = db->runs();
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].result.planName, "old");
    EXPECT_TRUE(runs[0].plan.empty());
    RunResult next = sampleRun();
    next.tensorMemoryBytes = 5e8;
    auto id = db->add(next, R"({"format": "colo.plan/1"})");  // migrates, then adds
    ASSERT_TRUE(id) << id.error().toString();
    EXPECT_EQ(*id, 2);
  }
  auto db = RunsDatabase::open(file);
  ASSERT_TRUE(db) << db.error().toString();
  const auto runs = db->runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].result.planName, "old");  // kept
  EXPECT_TRUE(runs[0].plan.empty());
  EXPECT_EQ(runs[1].plan, R"({"format": "colo.plan/1"})");
  EXPECT_DOUBLE_EQ(runs[1].result.tensorMemoryBytes, 5e8);
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(file.c_str(), &raw), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(raw, "SELECT value FROM meta WHERE key = 'schema_version'", -1, &st, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "2");
  sqlite3_finalize(st);
  sqlite3_close(raw);
}

TEST(RunResult, JsonRoundTripAndTables) {
  RunResult r = sampleRun();
  r.stepStartTensorBytes = 7e9;
  r.forwardHeldBytes = 8e9;
  auto back = resultFromJson(r.toJson());
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_EQ(back->losses, r.losses);
  EXPECT_DOUBLE_EQ(back->stepStartTensorBytes, 7e9);
  EXPECT_DOUBLE_EQ(back->forwardHeldBytes, 8e9);
  EXPECT_EQ(back->dp, 2);
  const std::string table = renderResult(r);
  EXPECT_NE(table.find("+25.0%"), std::string::npos) << table;  // 250 ms measured vs 200 ms predicted
  // Steps counted from 1, as the progress lines count them.
  EXPECT_NE(table.find(" at step 1 -> "), std::string::npos) << table;
  EXPECT_NE(table.find(" at step " + std::to_string(r.losses.size()) + "\n"), std::string::npos) << table;
  EXPECT_NE(renderComparison(r, r).find("1.00x"), std::string::npos);
  EXPECT_FALSE(resultFromJson(Json{{"plan", 1}}));
}

TEST(WorldInfo, ReadsTorchrunEnvironment) {
  setenv("RANK", "3", 1);
  setenv("WORLD_SIZE", "4", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("MASTER_ADDR", "node7", 1);
  setenv("MASTER_PORT", "29999", 1);
  auto w = WorldInfo::fromEnvironment();
  ASSERT_TRUE(w) << w.error().toString();
  EXPECT_EQ(w->rank, 3);
  EXPECT_EQ(w->world, 4);
  EXPECT_EQ(w->localRank, 1);
  EXPECT_EQ(w->masterAddr, "node7");
  EXPECT_EQ(w->masterPort, 29999);
  EXPECT_TRUE(WorldInfo::launchedByLauncher());
  setenv("RANK", "4", 1);
  EXPECT_FALSE(WorldInfo::fromEnvironment());
  setenv("MASTER_PORT", "http", 1);
  setenv("RANK", "0", 1);
  auto bad = WorldInfo::fromEnvironment();
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("MASTER_PORT"), std::string::npos);
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}) unsetenv(v);
  EXPECT_FALSE(WorldInfo::launchedByLauncher());
}

Plan tinyPlan(const std::string& model, std::int64_t tp, std::int64_t pp, std::int64_t dp) {
  Plan p;
  p.model = test::loadModelOrFail(test::dataFile("models/" + model + ".json"));
  p.cluster = test::loadClusterOrFail(test::dataFile("clusters/localhost-cpu.json"));
  p.parallel.tp = tp;
  p.parallel.pp = pp;
  p.parallel.dp = dp;
  p.microBatchSize = 1;
  p.globalBatchSize = 8;
  p.seqLen = 64;
  p.stages = uniformStages(4, pp, RecomputePolicy::kNone);
  return p;
}

TEST(CheckExecutable, NamesWhatTheExecutorCannotRun) {
  EXPECT_TRUE(checkExecutable(tinyPlan("tiny-gpt", 2, 1, 2), 4, "gloo"));
  auto wrongWorld = checkExecutable(tinyPlan("tiny-gpt", 2, 1, 2), 3, "gloo");
  ASSERT_FALSE(wrongWorld);
  EXPECT_NE(wrongWorld.error().message.find("= 4 processes, the job has 3"), std::string::npos) << wrongWorld.error().message;
  Plan zb = tinyPlan("tiny-gpt", 1, 2, 1);
  zb.schedule = Schedule::kZeroBubble;
  EXPECT_TRUE(checkExecutable(zb, 2, "gloo"));
  Plan zbSharded = tinyPlan("tiny-gpt", 1, 2, 2);
  zbSharded.schedule = Schedule::kZeroBubble;
  zbSharded.zeroStage = 2;
  EXPECT_TRUE(checkExecutable(zbSharded, 4, "gloo"));  // the units wait for their deferred weight gradients
  Plan zero3 = tinyPlan("tiny-gpt", 1, 1, 2);
  zero3.zeroStage = 3;
  EXPECT_TRUE(checkExecutable(zero3, 2, "gloo"));  // ZeRO 0-3 all run
  zero3.offload.optimizerFraction = 0.5;
  EXPECT_TRUE(checkExecutable(zero3, 2, "gloo"));  // ZeRO-Offload of optimizer states
  zero3.offload.paramsFraction = 0.5;
  EXPECT_NE(checkExecutable(zero3, 2, "gloo").error().message.find("offload.params_fraction"), std::string::npos);
  Plan cp = tinyPlan("tiny-gpt", 1, 1, 1);
  cp.parallel.cp = 2;
  EXPECT_TRUE(checkExecutable(cp, 2, "gloo"));  // the p2p ring
  cp.execution.cpCommType = CpCommType::kAllToAll;
  EXPECT_NE(checkExecutable(cp, 2, "gloo").error().message.find("cp_comm_type = a2a"), std::string::npos);
  // The executor and the planner read one list.
  EXPECT_TRUE(runnable(zbSharded));
  EXPECT_FALSE(runnable(zero3));  // parameter offload
  EXPECT_TRUE(runnable(tinyPlan("tiny-gpt", 2, 1, 2)));
  Plan perOp = tinyPlan("tiny-gpt", 1, 2, 1);
  perOp.stages[1].recompute = RecomputePolicy::kOp;
  perOp.stages[1].recomputeLayers = perOp.stages[1].layers;
  EXPECT_NE(checkExecutable(perOp, 2, "gloo").error().message.find("stages[1].recompute = op"), std::string::npos);
  Plan latent = tinyPlan("tiny-llama", 1, 1, 1);
  ModelSpec mla = *latent.model.spec;
  mla.numKvHeads = 0;
  mla.mla = MlaSpec{0, 64, 16, 16, 32};
  latent.model.spec = mla;
  EXPECT_NE(checkExecutable(latent, 1, "gloo").error().message.find("multi-head latent attention"), std::string::npos);
  Plan heads = tinyPlan("tiny-llama", 4, 1, 1);  // 2 key/value heads
  EXPECT_NE(checkExecutable(heads, 4, "gloo").error().message.find("key/value heads"), std::string::npos);
  EXPECT_NE(checkExecutable(tinyPlan("tiny-gpt", 1, 1, 1), 1, "mpi").error().message.find("--backend"), std::string::npos);
}

}  // namespace
}  // namespace colo::executor
