#include "validation_kernels.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "colo/core/json.h"
#include "colo/core/library.h"
#include "colo/core/model.h"
#include "colo/costmodel/hardware.h"
#include "colo/costmodel/op_cost.h"

namespace colo::validation {

namespace {

Error bad(const std::string& file, const std::string& path, const std::string& message) {
  return Error::badInput(message, file, path);
}

bool whole(const Json& v, double most) {
  return v.is_number() && v.get<double>() >= 1 && v.get<double>() <= most && v.get<double>() == std::floor(v.get<double>());
}
bool within(const Json& v, double least, double most) {
  return v.is_number() && v.get<double>() >= least && v.get<double>() <= most;
}
constexpr double kSide = 16777216.0;  // 2^24

// One block's file format: its own optional key, and how a point is checked and read.
struct BlockFormat {
  KernelBlock block;
  const char* name;
  const char* ownKey;  // the one key only this block has
  const char* shape;   // the point's columns, for messages
  const char* ranges;  // what each column may hold, for messages
  std::size_t columns;
  bool (*valid)(const Json& p);
  KernelPoint (*read)(const Json& p);
};

// Sides from 1 to 2^24 (whole numbers) and a speedup from 0.001 to 100.
bool validBlock(const Json& p) { return whole(p[0], kSide) && whole(p[1], kSide) && whole(p[2], kSide) && within(p[3], 0.001, 100); }
KernelPoint readBlock(const Json& p) { return {p[0].get<double>(), p[1].get<double>(), p[2].get<double>(), p[3].get<double>()}; }

// Up to 65,536 groups, 0, 4 or 8 accumulated bytes, and from 0.001 to 100,000 TFLOP/s.
bool validGemm(const Json& p) {
  return whole(p[0], 65536.0) && whole(p[1], kSide) && whole(p[2], kSide) && whole(p[3], kSide) && p[4].is_number() &&
         (p[4].get<double>() == 0 || p[4].get<double>() == 4 || p[4].get<double>() == 8) && within(p[5], 0.001, 100000);
}
KernelPoint readGemm(const Json& p) {
  KernelPoint point;
  point.groups = p[0].get<double>();
  point.m = p[1].get<double>();
  point.n = p[2].get<double>();
  point.k = p[3].get<double>();
  point.accumulateBytes = p[4].get<double>();
  point.tflops = p[5].get<double>();
  return point;
}

// Batch up to 65,536, sequence up to 2^24, up to 4,096 heads (key/value heads dividing them), head dims
// up to 1,024, times from 0.01 us to 1e9 us.
bool validAttention(const Json& p) {
  const bool shape = whole(p[0], 65536.0) && whole(p[1], kSide) && whole(p[2], 4096.0) && whole(p[3], 4096.0) &&
                     whole(p[4], 1024.0) && whole(p[5], 1024.0) && within(p[6], 0.01, 1e9) && within(p[7], 0.01, 1e9);
  return shape && std::fmod(p[2].get<double>(), p[3].get<double>()) == 0;
}
KernelPoint readAttention(const Json& p) {
  KernelPoint point;
  point.batch = p[0].get<double>();
  point.seq = p[1].get<double>();
  point.heads = p[2].get<double>();
  point.kvHeads = p[3].get<double>();
  point.headDim = p[4].get<double>();
  point.valueDim = p[5].get<double>();
  point.forwardSeconds = p[6].get<double>() * 1e-6;
  point.backwardSeconds = p[7].get<double>() * 1e-6;
  return point;
}

constexpr BlockFormat kFormats[] = {
    {KernelBlock::kLayerNormLinearSigmoid, "layernorm_linear_sigmoid", "recipe", "[M, K, N, speedup]",
     "whole sides from 1 to 16777216 and a speedup from 0.001 to 100", 4, validBlock, readBlock},
    {KernelBlock::kGemm, "gemm", "streams", "[groups, m, n, k, accumulate_bytes, tflops]",
     "whole groups from 1 to 65536 and sides from 1 to 16777216, accumulate_bytes 0, 4 or 8, tflops from 0.001 to 100000", 6,
     validGemm, readGemm},
    {KernelBlock::kAttention, "attention", nullptr, "[batch, seq, heads, kv_heads, d_qk, d_v, forward_us, backward_us]",
     "whole batch from 1 to 65536, seq from 1 to 16777216, heads and kv_heads from 1 to 4096 (kv_heads dividing heads), "
     "head dims from 1 to 1024, times from 0.01 to 1e9 us",
     8, validAttention, readAttention},
};

Result<const BlockFormat*> formatOf(const std::string& file, const std::string& block) {
  for (const auto& f : kFormats) {
    if (block == f.name) return &f;
  }
  return fail(bad(file, "/block", "block: expected \"layernorm_linear_sigmoid\", \"gemm\" or \"attention\", got \"" + block + "\""));
}

// The block's own key: layernorm_linear_sigmoid's float8 recipe, gemm's streams.
Result<void> readOwnKey(const Json& doc, const std::string& file, KernelBenchmark& b) {
  if (b.block == KernelBlock::kLayerNormLinearSigmoid) {
    const bool given = doc.contains("recipe") && doc["recipe"].is_string();
    auto parsed = parseFloat8Recipe(given ? doc["recipe"].get<std::string>() : std::string());
    if (!given || !parsed || transformerEngineRecipe(*parsed)) {
      return fail(bad(file, "/recipe", "recipe: expected tensorwise, rowwise or rowwise_with_gw_hp, got " +
                                           (doc.contains("recipe") ? describeJsonValue(doc["recipe"]) : std::string("nothing"))));
    }
    b.recipe = *parsed;
  } else if (b.block == KernelBlock::kGemm && doc.contains("streams")) {
    const Json& streams = doc["streams"];
    if (!streams.is_number() || !(streams.get<double>() >= 0) || streams.get<double>() > 64 ||
        streams.get<double>() != std::floor(streams.get<double>())) {
      return fail(bad(file, "/streams", "streams: expected a whole number from 0 to 64, got " + describeJsonValue(streams)));
    }
    b.streams = static_cast<int>(streams.get<double>());
  }
  return {};
}

Result<void> readPoints(const Json& doc, const std::string& file, const BlockFormat& format, KernelBenchmark& b) {
  if (!doc.contains("points") || !doc["points"].is_array() || doc["points"].empty()) {
    return fail(bad(file, "/points", std::string("points: expected a non-empty array of ") + format.shape + ", got " +
                                         (doc.contains("points") ? describeJsonValue(doc["points"]) : "nothing")));
  }
  const Json& points = doc["points"];
  for (std::size_t i = 0; i < points.size(); ++i) {
    const Json& p = points[i];
    if (!p.is_array() || p.size() != format.columns || !format.valid(p)) {
      return fail(bad(file, "/points/" + std::to_string(i), "points[" + std::to_string(i) + "]: expected " + format.shape + ": " +
                                                                format.ranges + ", got " + describeJsonValue(p)));
    }
    b.points.push_back(format.read(p));
  }
  return {};
}

}  // namespace

Result<KernelBenchmark> loadKernelBenchmark(const std::string& file) {
  auto doc = readJsonFile(file);
  if (!doc) return fail(doc.error());
  if (auto ok = requireFormat(*doc, file, "kernel-benchmark", 1); !ok) return fail(ok.error());
  KernelBenchmark b;
  b.file = file;
  auto text = [&](const char* key) -> Result<std::string> {
    if (!doc->contains(key) || !(*doc)[key].is_string() || (*doc)[key].get<std::string>().empty()) {
      return fail(bad(file, std::string("/") + key, std::string(key) + ": expected a non-empty string, got " +
                                                        (doc->contains(key) ? describeJsonValue((*doc)[key]) : "nothing")));
    }
    return (*doc)[key].get<std::string>();
  };
  auto id = text("id");
  if (!id) return fail(id.error());
  b.id = *id;
  auto cluster = text("cluster");
  if (!cluster) return fail(cluster.error());
  const auto entries = libraryEntries(LibraryKind::kClusters);
  if (std::find(entries.begin(), entries.end(), *cluster) == entries.end()) {
    return fail(bad(file, "/cluster", "cluster: expected the name of a library cluster (data/clusters), got \"" + *cluster + "\""));
  }
  b.cluster = *cluster;
  auto block = text("block");
  if (!block) return fail(block.error());
  auto format = formatOf(file, *block);
  if (!format) return fail(format.error());
  b.block = (*format)->block;
  if (doc->contains("source") && (*doc)["source"].is_object() && (*doc)["source"].contains("citation") &&
      (*doc)["source"]["citation"].is_string()) {
    b.citation = (*doc)["source"]["citation"].get<std::string>();
  }
  // A key of another block, or one misspelt ("stream"), would be read as its default: refused instead.
  const std::string own = (*format)->ownKey ? (*format)->ownKey : "";
  for (const auto& [key, value] : doc->items()) {
    static const std::set<std::string> common{"format", "id", "source", "cluster", "block", "measured", "columns", "points"};
    if (common.contains(key) || key == own) continue;
    return fail(bad(file, "/" + key, "unknown key \"" + key + "\" for block \"" + *block + "\" (expected " +
                                         (own.empty() ? std::string() : own + ", ") +
                                         "format, id, source, cluster, block, measured, columns, points)"));
  }
  if (auto ok = readOwnKey(*doc, file, b); !ok) return fail(ok.error());
  if (auto ok = readPoints(*doc, file, **format, b); !ok) return fail(ok.error());
  return b;
}

Result<std::vector<KernelBenchmark>> loadKernelBenchmarks(const std::string& folder) {
  std::vector<KernelBenchmark> out;
  std::error_code ec;
  if (!std::filesystem::is_directory(folder, ec)) return out;
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
    if (entry.is_regular_file() && entry.path().extension() == ".json") files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    auto b = loadKernelBenchmark(f);
    if (!b) return fail(b.error());
    out.push_back(std::move(*b));
  }
  return out;
}

namespace {

Result<GpuSpec> gpuOf(const KernelBenchmark& bench) {
  auto file = resolveLibraryFile(LibraryKind::kClusters, bench.cluster);
  if (!file) return fail(Error::badInput("cluster: " + file.error().message, bench.file, "/cluster"));
  auto cluster = loadCluster(*file);
  if (!cluster) return fail(Error::badInput("cluster \"" + bench.cluster + "\": " + cluster.error().toString(), bench.file, "/cluster"));
  return cluster->gpu;
}

BlockSeconds blockSeconds(const KernelBenchmark& bench, const GpuSpec& gpu, const KernelPoint& p) {
  using costmodel::DeviceModel;
  const DeviceModel bf16 = costmodel::deviceModel(gpu, DType::kBf16);
  const DeviceModel fp8 = costmodel::deviceModel(gpu, DType::kFp8);
  const double mk = p.m * p.k, mn = p.m * p.n;
  // LayerNorm forward (read x, write its output) and backward (read the gradient and x, write the
  // gradient); the sigmoid likewise on [m, n]; all 16-bit, the same in both precisions.
  const double elementwise = costmodel::streamSeconds(4 * mk, bf16) + costmodel::streamSeconds(6 * mk, bf16) +
                             costmodel::streamSeconds(4 * mn, bf16) + costmodel::streamSeconds(6 * mn, bf16);
  // Forward, input-gradient and weight-gradient GEMMs.
  auto gemms = [&](const DeviceModel& d, std::int64_t bytes) {
    return costmodel::gemmSeconds(p.m, p.n, p.k, 1, bytes, d) + costmodel::gemmSeconds(p.m, p.k, p.n, 1, bytes, d) +
           costmodel::gemmSeconds(p.k, p.n, p.m, 1, bytes, d);
  };
  const auto casts = costmodel::float8CastSeconds(bench.recipe, mk, p.k * p.n, mn, 1.0, fp8);
  BlockSeconds s;
  s.bf16 = elementwise + gemms(bf16, 2);
  s.float8 = elementwise + gemms(fp8, 1) + casts.forward + casts.backward;
  return s;
}

// As the evaluator costs an expert or dense GEMM (layer_cost.cpp): the roofline with tile and wave
// quantisation, over the benchmark's streams, and an accumulating weight-gradient GEMM bounded by
// reading and writing its main_grad.
double gemmPointSeconds(const KernelBenchmark& bench, const costmodel::DeviceModel& d, const KernelPoint& p) {
  const double seconds = costmodel::groupedGemmSeconds(p.m, p.n, p.k, p.groups, bench.streams, 2, d);
  if (p.accumulateBytes <= 0) return seconds;
  const double io = p.groups * ((p.m * p.k + p.k * p.n) * 2.0 + p.m * p.n * p.accumulateBytes);
  return std::max(seconds, io / d.memoryBytesPerSecond);
}

// As the evaluator costs fused attention (layer_cost.cpp): the causal mask leaves half of the
// query-key pairs; Q.K^T over the query/key head dim, P.V over the value head dim.
costmodel::FusedAttentionSeconds attentionPointSeconds(const costmodel::DeviceModel& d, const KernelPoint& p) {
  const double flops = p.batch * p.heads * p.seq * p.seq * (p.headDim + p.valueDim);
  return costmodel::fusedAttentionSeconds(flops, d, p.headDim);
}

}  // namespace

Result<costmodel::FusedAttentionSeconds> predictAttention(const KernelBenchmark& bench, const KernelPoint& point) {
  auto gpu = gpuOf(bench);
  if (!gpu) return fail(gpu.error());
  return attentionPointSeconds(costmodel::deviceModel(*gpu, DType::kBf16), point);
}

Result<double> predictGemm(const KernelBenchmark& bench, const KernelPoint& point) {
  auto gpu = gpuOf(bench);
  if (!gpu) return fail(gpu.error());
  return gemmPointSeconds(bench, costmodel::deviceModel(*gpu, DType::kBf16), point);
}

namespace {

double medianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

Result<BlockSeconds> predictBlock(const KernelBenchmark& bench, const KernelPoint& point) {
  auto gpu = gpuOf(bench);
  if (!gpu) return fail(gpu.error());
  return blockSeconds(bench, *gpu, point);
}

Result<KernelCheck> checkKernelBenchmark(const KernelBenchmark& bench) {
  KernelCheck c;
  std::vector<double> signedErrors;
  std::size_t same = 0;
  auto gpu = gpuOf(bench);
  if (!gpu) return fail(gpu.error());
  const costmodel::DeviceModel bf16 = costmodel::deviceModel(*gpu, DType::kBf16);
  for (const auto& p : bench.points) {
    if (bench.block == KernelBlock::kAttention) {
      const auto predicted = attentionPointSeconds(bf16, p);
      signedErrors.push_back(predicted.forward / p.forwardSeconds - 1.0);
      signedErrors.push_back(predicted.backward / p.backwardSeconds - 1.0);
      continue;
    }
    if (bench.block == KernelBlock::kGemm) {
      const double measured = 2.0 * p.groups * p.m * p.n * p.k / (p.tflops * 1e12);
      signedErrors.push_back(gemmPointSeconds(bench, bf16, p) / measured - 1.0);
      continue;
    }
    const BlockSeconds s = blockSeconds(bench, *gpu, p);
    const double predicted = s.bf16 / s.float8;
    signedErrors.push_back(predicted / p.speedup - 1.0);
    if ((predicted >= 1.0) == (p.speedup >= 1.0)) ++same;
  }
  c.shapes = bench.points.size();
  if (signedErrors.empty()) return c;
  for (double e : signedErrors) c.meanAbsError += std::abs(e);
  c.meanAbsError /= static_cast<double>(signedErrors.size());
  c.medianSigned = medianOf(signedErrors);
  c.sameSide = static_cast<double>(same) / static_cast<double>(c.shapes);
  return c;
}

}  // namespace colo::validation
