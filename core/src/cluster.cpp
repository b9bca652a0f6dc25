#include "colo/core/cluster.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "colo/core/limits.h"
#include "json_reader.h"

namespace colo {
namespace {

using detail::JsonReader;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kGB = 1e9;

const std::initializer_list<std::string_view> kLinkKinds = {
    "nvswitch", "nvlink", "hybrid_cube_mesh", "pcie", "infiniband", "roce", "ethernet"};

LinkKind parseLinkKind(const std::string& s) {
  for (int i = 0; i <= static_cast<int>(LinkKind::kEthernet); ++i) {
    if (toString(static_cast<LinkKind>(i)) == s) return static_cast<LinkKind>(i);
  }
  return LinkKind::kEthernet;
}

}  // namespace

bool isNetwork(LinkKind kind) {
  return kind == LinkKind::kInfiniBand || kind == LinkKind::kRoce || kind == LinkKind::kEthernet;
}

std::string toString(DType dtype) {
  switch (dtype) {
    case DType::kFp32: return "fp32";
    case DType::kTf32: return "tf32";
    case DType::kFp16: return "fp16";
    case DType::kBf16: return "bf16";
    case DType::kFp8: return "fp8";
    case DType::kFp4: return "fp4";
  }
  return "fp32";
}

Result<DType> parseDType(const std::string& name) {
  for (const DType d : {DType::kFp32, DType::kTf32, DType::kFp16, DType::kBf16, DType::kFp8, DType::kFp4}) {
    if (toString(d) == name) return d;
  }
  return fail(Error::badInput("unknown precision \"" + name + "\" (expected one of: fp32, tf32, fp16, bf16, fp8, fp4)"));
}

std::int64_t bytesPerElement(DType dtype) {
  switch (dtype) {
    case DType::kFp32:
    case DType::kTf32:
      return 4;
    case DType::kFp16:
    case DType::kBf16:
      return 2;
    case DType::kFp8:
    case DType::kFp4:
      return 1;
  }
  return 4;
}

std::string toString(LinkKind kind) {
  switch (kind) {
    case LinkKind::kNvSwitch: return "nvswitch";
    case LinkKind::kNvLink: return "nvlink";
    case LinkKind::kHybridCubeMesh: return "hybrid_cube_mesh";
    case LinkKind::kPcie: return "pcie";
    case LinkKind::kInfiniBand: return "infiniband";
    case LinkKind::kRoce: return "roce";
    case LinkKind::kEthernet: return "ethernet";
  }
  return "ethernet";
}

const LinkLevel& ClusterSpec::levelBetween(std::int64_t a, std::int64_t b) const {
  for (const auto& level : links) {
    if (a / level.spanGpus == b / level.spanGpus) return level;
  }
  return links.back();
}

Result<void> validateCluster(const ClusterSpec& c, const std::string& file) {
  auto bad = [&](const std::string& path, const std::string& message) {
    return fail(Error::badInput(message, file, path));
  };
  if (c.nodes <= 0) return bad("/nodes", "must be a positive integer, got " + std::to_string(c.nodes));
  if (c.gpusPerNode <= 0) return bad("/gpus_per_node", "must be a positive integer, got " + std::to_string(c.gpusPerNode));
  if (c.nodes > limits::kMaxGpus) return bad("/nodes", "must be at most " + std::to_string(limits::kMaxGpus) + ", got " + std::to_string(c.nodes));
  if (c.gpusPerNode > limits::kMaxGpus) {
    return bad("/gpus_per_node", "must be at most " + std::to_string(limits::kMaxGpus) + ", got " + std::to_string(c.gpusPerNode));
  }
  if (c.gpusPerHost < 0 || (c.gpusPerHost > 0 && c.gpusPerNode % c.gpusPerHost != 0)) {
    return bad("/gpus_per_host", "must divide gpus_per_node " + std::to_string(c.gpusPerNode) + ", got " + std::to_string(c.gpusPerHost));
  }
  if (c.totalGpus() > limits::kMaxGpus) {
    return bad("/nodes", "nodes x gpus_per_node = " + std::to_string(c.totalGpus()) + " GPUs, more than the " +
                             std::to_string(limits::kMaxGpus) + " colo plans for");
  }
  if (c.links.size() > 64) return bad("/links", "at most 64 link levels, got " + std::to_string(c.links.size()));
  if (c.gpu.memoryBytes <= 0) return bad("/gpu/memory_GiB", "must be positive");
  if (c.gpu.peakFlopsPerSecond.empty()) return bad("/gpu/peak_TFLOPs", "needs at least one precision");
  if (c.links.empty()) return bad("/links", "needs at least one link level");
  std::int64_t previous = 1;
  for (std::size_t i = 0; i < c.links.size(); ++i) {
    const auto& l = c.links[i];
    const std::string at = "/links/" + std::to_string(i);
    if (l.spanGpus <= 0) return bad(at + "/span_gpus", "must be positive, got " + std::to_string(l.spanGpus));
    if (l.spanGpus <= previous && !(i == 0 && l.spanGpus == 1 && c.totalGpus() == 1)) {
      return bad(at + "/span_gpus", "levels must span more GPUs outward: " + std::to_string(l.spanGpus) +
                                        " after " + std::to_string(previous));
    }
    if (l.spanGpus % previous != 0) {
      return bad(at + "/span_gpus", "must be a multiple of the inner level's span " + std::to_string(previous) +
                                        ", got " + std::to_string(l.spanGpus));
    }
    if (l.spanGpus < c.gpusPerNode && c.gpusPerNode % l.spanGpus != 0) {
      return bad(at + "/span_gpus", "must divide gpus_per_node " + std::to_string(c.gpusPerNode) + ", got " +
                                        std::to_string(l.spanGpus));
    }
    if (l.spanGpus > c.gpusPerNode && !isNetwork(l.kind)) {
      return bad(at + "/kind", "\"" + toString(l.kind) + "\" cannot join GPUs of different nodes (span " +
                                   std::to_string(l.spanGpus) + " > gpus_per_node " + std::to_string(c.gpusPerNode) +
                                   "); use infiniband, roce or ethernet");
    }
    if (l.bytesPerSecond <= 0) return bad(at + "/bandwidth_GBps", "must be positive");
    if (l.latencySeconds < 0) return bad(at + "/latency_us", "must not be negative");
    if (l.efficiency < 0 || l.efficiency > 1) {
      return bad(at + "/efficiency", "must be a share of the bandwidth in (0, 1], got " + std::to_string(l.efficiency));
    }
    if (l.launchSeconds < 0) return bad(at + "/launch_us", "must not be negative");
    for (std::size_t k = 0; k < l.collectives.size(); ++k) {
      const auto& f = l.collectives[k];
      const std::string fit = at + "/collectives/" + f.collective;
      if (std::find(kFittedCollectives.begin(), kFittedCollectives.end(), f.collective) == kFittedCollectives.end()) {
        return bad(fit, "unknown collective; expected all_reduce, all_gather, reduce_scatter or all_to_all");
      }
      for (std::size_t j = 0; j < k; ++j) {
        if (l.collectives[j].collective == f.collective) return bad(fit, "given twice");
      }
      if (f.efficiency <= 0 || f.efficiency > 1) {
        return bad(fit + "/efficiency", "must be a share of the bandwidth in (0, 1], got " + std::to_string(f.efficiency));
      }
      if (f.latencySeconds < 0) return bad(fit + "/latency_us", "must not be negative");
      if (f.launchSeconds < 0) return bad(fit + "/launch_us", "must not be negative");
    }
    if (i > 0 && l.bytesPerSecond > c.links[i - 1].bytesPerSecond * 1.0001) {
      // Not impossible in principle, but in every real system an outer level is slower: almost
      // always a unit mistake (Gb/s written as GB/s).
      return bad(at + "/bandwidth_GBps", "outer level is faster than the inner level (" +
                                             std::to_string(l.bytesPerSecond / kGB) + " > " +
                                             std::to_string(c.links[i - 1].bytesPerSecond / kGB) +
                                             " GB/s); check the units");
    }
    previous = l.spanGpus;
  }
  if (c.links.back().spanGpus != c.totalGpus()) {
    return bad("/links/" + std::to_string(c.links.size() - 1) + "/span_gpus",
               "the outermost level must span the whole cluster (" + std::to_string(c.totalGpus()) + " GPUs), got " +
                   std::to_string(c.links.back().spanGpus) +
                   (c.nodes > 1 ? "; a multi-node cluster needs a network level" : ""));
  }
  if (c.hostMemoryBytes < 0) return bad("/host_memory_GiB", "must not be negative");
  if (c.pcieBytesPerSecond <= 0) return bad("/pcie_bandwidth_GBps", "must be positive");
  return {};
}

Result<ClusterSpec> scaleCluster(const ClusterSpec& cluster, std::int64_t gpus) {
  if (gpus <= 0) return fail(Error::badInput("--gpus must be positive, got " + std::to_string(gpus)));
  if (gpus > limits::kMaxGpus) {
    return fail(Error::badInput("--gpus " + std::to_string(gpus) + " is more than the " + std::to_string(limits::kMaxGpus) +
                                " GPUs colo plans for"));
  }
  ClusterSpec out = cluster;
  const std::int64_t oldTotal = cluster.totalGpus();
  // A node whose NVLink domain spans several hosts (gpus_per_host: GB200/GB300 NVL72, compute trays of
  // 4) is handed out by hosts, so a job may take part of it: whole hosts, in equal domains, the largest
  // that divide the job and hold at least half a node (64 GPUs on NVL72: one domain of 64; 128: two of
  // 64; 144: two of 72).
  const std::int64_t host = cluster.hostGpus();
  const bool byHosts = host < cluster.gpusPerNode;
  auto domainOf = [&](std::int64_t n) -> std::int64_t {
    if (n % cluster.gpusPerNode == 0) return cluster.gpusPerNode;
    if (n % host != 0) return 0;
    if (n < cluster.gpusPerNode) return n;
    for (std::int64_t d = cluster.gpusPerNode - cluster.gpusPerNode % host; 2 * d >= cluster.gpusPerNode; d -= host) {
      if (n % d == 0) return d;
    }
    return 0;
  };
  if (byHosts && gpus % cluster.gpusPerNode != 0 && !(gpus < host && host % gpus == 0)) {
    const std::int64_t domain = domainOf(gpus);
    if (domain == 0) {
      std::int64_t below = gpus - 1, above = gpus + 1;
      while (below > 0 && domainOf(below) == 0) --below;
      while (domainOf(above) == 0) ++above;
      return fail(Error::badInput("--gpus " + std::to_string(gpus) + " on " + cluster.name + ": its NVLink domains of " +
                                  std::to_string(cluster.gpusPerNode) + " GPUs are handed out by hosts of " + std::to_string(host) +
                                  ", and " + std::to_string(gpus) + " GPUs make neither one domain of whole hosts nor equal ones of at least " +
                                  std::to_string((cluster.gpusPerNode + 1) / 2) + " GPUs (try --gpus " +
                                  (below > 0 ? std::to_string(below) + " or " : std::string()) + std::to_string(above) + ")"));
    }
    out.nodes = gpus / domain;
    out.gpusPerNode = domain;
  } else if (gpus < cluster.gpusPerNode) {
    if (cluster.gpusPerNode % gpus != 0) {
      return fail(Error::badInput("--gpus " + std::to_string(gpus) + " must divide gpus_per_node " +
                                  std::to_string(cluster.gpusPerNode) + " when it is less than one node of " +
                                  cluster.name));
    }
    out.nodes = 1;
    out.gpusPerNode = gpus;
    if (gpus <= host) out.gpusPerHost = 0;  // part of one host
  } else {
    if (gpus % cluster.gpusPerNode != 0) {
      return fail(Error::badInput("--gpus " + std::to_string(gpus) + " is not a whole number of nodes of " +
                                  std::to_string(cluster.gpusPerNode) + " GPUs (" + cluster.name + ")"));
    }
    out.nodes = gpus / cluster.gpusPerNode;
  }
  // Levels inside a node keep their span (capped at the new node size); a network level spans everything.
  std::vector<LinkLevel> links;
  for (const auto& level : cluster.links) {
    LinkLevel l = level;
    if (isNetwork(l.kind) && l.spanGpus == oldTotal) {
      l.spanGpus = out.totalGpus();
    } else {
      l.spanGpus = std::min({l.spanGpus, out.gpusPerNode, out.totalGpus()});
    }
    if (!links.empty() && l.spanGpus <= links.back().spanGpus) continue;  // a level with nothing left to join
    links.push_back(l);
  }
  if (out.nodes > 1 && links.back().spanGpus != out.totalGpus()) {
    return fail(Error::badInput(cluster.name + " has no network level, so it cannot grow beyond one node to " +
                                std::to_string(gpus) + " GPUs"));
  }
  out.links = std::move(links);
  if (gpus != oldTotal) out.name = cluster.name + " (scaled to " + std::to_string(gpus) + (gpus == 1 ? " GPU)" : " GPUs)");
  if (byHosts && out.gpusPerNode != cluster.gpusPerNode && out.nodes > 1) {
    out.name = cluster.name + " (scaled to " + std::to_string(gpus) + " GPUs in " + std::to_string(out.nodes) + " NVLink domains of " +
               std::to_string(out.gpusPerNode) + ")";
  }
  if (auto valid = validateCluster(out); !valid) return fail(valid.error());
  return out;
}

Result<ClusterSpec> clusterFromJson(const Json& document, const std::string& file) {
  auto cluster = detail::catchLoad(file, [&]() -> ClusterSpec {
    const JsonReader r(document, file);
    r.accept({"format"});
    ClusterSpec c;
    c.name = r.string("name");
    c.source = r.string("source", "");
    c.nodes = r.boundedInteger("nodes", 1, limits::kMaxGpus);
    c.gpusPerNode = r.boundedInteger("gpus_per_node", 1, limits::kMaxGpus);
    if (r.json().contains("gpus_per_host")) c.gpusPerHost = r.boundedInteger("gpus_per_host", 1, limits::kMaxGpus);
    const JsonReader g = r.object("gpu");
    c.gpu.name = g.string("name");
    c.gpu.memoryBytes = g.positiveNumber("memory_GiB") * kGiB;
    c.gpu.hbmBytesPerSecond = g.positiveNumber("hbm_bandwidth_GBps") * kGB;
    const JsonReader peaks = g.object("peak_TFLOPs");
    for (const auto& [key, value] : g.json().at("peak_TFLOPs").items()) {
      auto dtype = parseDType(key);
      if (!dtype) peaks.fail(key, dtype.error().message);
      c.gpu.peakFlopsPerSecond[*dtype] = peaks.positiveNumber(key) * 1e12;
    }
    if (c.gpu.peakFlopsPerSecond.empty()) g.fail("peak_TFLOPs", "needs at least one precision, e.g. {\"bf16\": 312}");
    g.rejectUnknownKeys();
    const auto levels = r.arrayOfObjects("links");
    for (const auto& l : levels) {
      LinkLevel level;
      level.name = l.string("name");
      level.kind = parseLinkKind(l.choice("kind", kLinkKinds));
      level.spanGpus = l.boundedInteger("span_gpus", 0, limits::kMaxGpus * limits::kMaxGpus, 0);
      if (level.spanGpus == 0) level.spanGpus = c.totalGpus();
      level.bytesPerSecond = l.positiveNumber("bandwidth_GBps") * kGB;
      level.latencySeconds = l.nonNegativeNumber("latency_us") * 1e-6;
      if (l.has("efficiency")) level.efficiency = l.positiveNumber("efficiency");
      level.launchSeconds = l.nonNegativeNumber("launch_us", 0.0) * 1e-6;
      if (l.has("collectives")) {
        const JsonReader fits = l.object("collectives");
        for (const auto& [key, value] : fits.json().items()) {
          // Named first, so a misspelt name is reported as such rather than as its body's missing field.
          if (std::find(kFittedCollectives.begin(), kFittedCollectives.end(), key) == kFittedCollectives.end()) {
            fits.fail(key, "unknown collective; expected all_reduce, all_gather, reduce_scatter or all_to_all");
          }
          const JsonReader f = fits.object(key);
          level.collectives.push_back({key, f.positiveNumber("efficiency"), f.nonNegativeNumber("latency_us") * 1e-6,
                                       f.nonNegativeNumber("launch_us") * 1e-6});
          f.rejectUnknownKeys();
        }
      }
      l.rejectUnknownKeys();
      c.links.push_back(level);
    }
    c.hostMemoryBytes = r.nonNegativeNumber("host_memory_GiB", 0.0) * kGiB;
    c.pcieBytesPerSecond = r.positiveNumber("pcie_bandwidth_GBps") * kGB;
    c.nvmeBytesPerSecond = r.nonNegativeNumber("nvme_bandwidth_GBps", 0.0) * kGB;
    c.nvmeCapacityBytes = r.nonNegativeNumber("nvme_capacity_GiB", 0.0) * kGiB;
    r.rejectUnknownKeys();
    return c;
  });
  if (!cluster) return cluster;
  if (auto valid = validateCluster(*cluster, file); !valid) return fail(valid.error());
  return cluster;
}

namespace {

// A figure converted back to the file's unit, to 12 significant digits: 6.4 us read as 6.4e-6 s writes
// back as 6.4, not 6.3999999999999995, so a cluster (and the plan's hash of it) survives a round trip.
double tidy(double value) {
  if (!std::isfinite(value) || value == 0) return value;
  char text[32];
  std::snprintf(text, sizeof text, "%.12g", value);
  return std::strtod(text, nullptr);
}

}  // namespace

Json clusterToJson(const ClusterSpec& c) {
  Json j;
  j["format"] = "colo.cluster/1";
  j["name"] = c.name;
  if (!c.source.empty()) j["source"] = c.source;
  j["nodes"] = c.nodes;
  j["gpus_per_node"] = c.gpusPerNode;
  if (c.gpusPerHost > 0) j["gpus_per_host"] = c.gpusPerHost;
  Json peaks = Json::object();
  for (const auto& [dtype, flops] : c.gpu.peakFlopsPerSecond) peaks[toString(dtype)] = tidy(flops / 1e12);
  j["gpu"] = {{"name", c.gpu.name},
              {"memory_GiB", tidy(c.gpu.memoryBytes / kGiB)},
              {"peak_TFLOPs", peaks},
              {"hbm_bandwidth_GBps", tidy(c.gpu.hbmBytesPerSecond / kGB)}};
  Json links = Json::array();
  for (const auto& l : c.links) {
    Json level = {{"name", l.name},
                  {"kind", toString(l.kind)},
                  {"span_gpus", l.spanGpus},
                  {"bandwidth_GBps", tidy(l.bytesPerSecond / kGB)},
                  {"latency_us", tidy(l.latencySeconds * 1e6)}};
    // Written only when measured, so a cluster without them keeps its hash.
    if (l.efficiency > 0) level["efficiency"] = tidy(l.efficiency);
    if (l.launchSeconds > 0) level["launch_us"] = tidy(l.launchSeconds * 1e6);
    for (const auto& f : l.collectives) {
      level["collectives"][f.collective] = {{"efficiency", tidy(f.efficiency)},
                                            {"latency_us", tidy(f.latencySeconds * 1e6)},
                                            {"launch_us", tidy(f.launchSeconds * 1e6)}};
    }
    links.push_back(std::move(level));
  }
  j["links"] = links;
  j["host_memory_GiB"] = tidy(c.hostMemoryBytes / kGiB);
  j["pcie_bandwidth_GBps"] = tidy(c.pcieBytesPerSecond / kGB);
  j["nvme_bandwidth_GBps"] = tidy(c.nvmeBytesPerSecond / kGB);
  j["nvme_capacity_GiB"] = tidy(c.nvmeCapacityBytes / kGiB);
  return j;
}

}  // namespace colo
