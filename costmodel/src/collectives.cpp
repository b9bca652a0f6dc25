#include "colo/costmodel/collectives.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "colo/costmodel/hardware.h"

namespace colo::costmodel {
namespace {

std::int64_t degree(const Parallelism& p, std::string_view name) {
  if (name == "tp") return p.tp;
  if (name == "cp") return p.cp;
  if (name == "dp") return p.dp;
  return p.pp;
}

// The name a link level's per-collective fit goes by (none for point-to-point sends).
std::string_view fitName(Collective kind) {
  switch (kind) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllToAll: return "all_to_all";
    case Collective::kSendRecv: return "";
  }
  return "";
}

// What one collective pays on a level: its own measured figures where the level has them.
struct LevelFigures {
  double efficiency, latency, launch;
};
// (Inlined: the search costs tens of millions of collectives.)
[[gnu::always_inline]] inline LevelFigures figures(const LinkLevel* level, Collective kind) {
  if (const CollectiveFit* f = level->fitFor(fitName(kind))) return {f->efficiency, f->latencySeconds, f->launchSeconds};
  return {level->efficiency > 0 ? level->efficiency : linkEfficiency(level->kind), level->latencySeconds, level->launchSeconds};
}

// A member's achievable rate on one level of its group.
double levelRate(const LinkLevel* level, const GroupPlacement& g, Collective kind) {
  double r = level->bytesPerSecond * figures(level, kind).efficiency;
  // DGX-1's hybrid cube mesh gives each V100 six NVLinks: four to GPUs of its own quad, two to the
  // other quad. A group of up to four GPUs (one quad) can use four of them, a pair two.
  if (level->kind == LinkKind::kHybridCubeMesh && level == g.inner) {
    const double links = g.perNode >= 8 ? 6.0 : g.perNode >= 4 ? 4.0 : 2.0;
    r *= links / 6.0;
  }
  return r;
}

}  // namespace

GroupPlacement placeGroup(const ClusterSpec& cluster, const Parallelism& parallel, Dim dim) {
  const std::string_view name = dim == Dim::kTp ? "tp" : dim == Dim::kCp ? "cp" : dim == Dim::kPp ? "pp" : "dp";
  std::int64_t stride = 1;
  for (const auto& d : parallel.rankOrder) {
    if (d == name) break;
    stride *= degree(parallel, d);
  }
  const std::int64_t size = dim == Dim::kExpert ? parallel.ep : dim == Dim::kExpertData ? parallel.expertDp() : degree(parallel, name);
  // The expert layers' mesh is expert_tp-ep-edp over the stage's ranks, innermost first (Megatron-Core's
  // expert rank generator): an expert-parallel group's members are expert_tp ranks apart, an expert-
  // data-parallel group's expert_tp x ep.
  if (dim == Dim::kExpert) stride = parallel.expertTp();
  if (dim == Dim::kExpertData) stride = parallel.expertTp() * parallel.ep;
  return placeRanks(cluster, size, stride);
}

GroupPlacement placeRanks(const ClusterSpec& cluster, std::int64_t size, std::int64_t stride) {
  GroupPlacement g;
  g.size = size;
  g.stride = stride;
  if (g.size <= 1) return g;
  const std::int64_t gpn = cluster.gpusPerNode;
  const std::int64_t span = stride * (g.size - 1) + 1;  // ranks from the first member to the last
  g.perNode = stride >= gpn ? 1 : std::min(g.size, gpn / stride);
  if (g.perNode > 1) {
    // The innermost level that joins `perNode` members spaced by `stride`.
    const std::int64_t inNodeSpan = stride * (g.perNode - 1) + 1;
    for (const auto& level : cluster.links) {
      if (level.spanGpus >= inNodeSpan) {
        g.inner = &level;
        break;
      }
    }
  }
  if (span > gpn || g.perNode < g.size) g.outer = &cluster.links.back();
  if (!g.outer && !g.inner) g.inner = &cluster.links.front();
  return g;
}

double collectiveSeconds(Collective kind, double bytes, const GroupPlacement& g) {
  if (bytes <= 0) return 0.0;
  if (g.size <= 1 && kind != Collective::kSendRecv) return 0.0;
  const LinkLevel* slowest = g.outer ? g.outer : g.inner;
  if (!slowest) return 0.0;
  auto rate = [&](const LinkLevel* level) { return levelRate(level, g, kind); };
  // Bandwidth per GPU along the ring: inside a node the member's own link; across nodes the node's
  // members share the traffic over their own NICs (rail-optimised DGX networks), capped by the node.
  double bandwidth = rate(slowest);
  if (g.outer && g.inner) bandwidth = std::min(rate(g.inner), rate(g.outer) * static_cast<double>(g.perNode));
  const double n = static_cast<double>(g.size);
  const double latency = figures(g.outer ? g.outer : g.inner, kind).latency;
  // One collective's fixed cost (launch, channel setup) on the level that paces it.
  const double launch = figures(slowest, kind).launch;
  switch (kind) {
    case Collective::kAllReduce:
      return launch + 2.0 * (n - 1) / n * bytes / bandwidth + 2.0 * (n - 1) * latency;
    case Collective::kReduceScatter:
    case Collective::kAllGather:
      return launch + (n - 1) / n * bytes / bandwidth + (n - 1) * latency;
    case Collective::kAllToAll: {
      // Every member sends (n-1)/n of its buffer; across nodes, the share leaving the node goes over
      // the network at the member's own rate.
      const double offNode = g.outer ? (n - static_cast<double>(g.perNode)) / n : 0.0;
      const double onNode = (static_cast<double>(g.perNode) - 1) / n;
      return allToAllSeconds(bytes, g, offNode, onNode);
    }
    case Collective::kSendRecv:
      return bytes / rate(slowest) + latency;  // point to point: no collective launch
  }
  return 0.0;
}

double allToAllSeconds(double bytes, const GroupPlacement& g, double offNodeShare, double onNodeShare) {
  if (bytes <= 0 || g.size <= 1) return 0.0;
  const LinkLevel* slowest = g.outer ? g.outer : g.inner;
  if (!slowest) return 0.0;
  auto rate = [&](const LinkLevel* level) { return levelRate(level, g, Collective::kAllToAll); };
  double t = 0;
  if (g.inner && onNodeShare > 0) t = std::max(t, onNodeShare * bytes / rate(g.inner));
  if (g.outer && offNodeShare > 0) t = std::max(t, offNodeShare * bytes / rate(g.outer));
  const double latency = figures(g.outer ? g.outer : g.inner, Collective::kAllToAll).latency;
  return figures(slowest, Collective::kAllToAll).launch + t + (static_cast<double>(g.size) - 1) * latency;
}

}  // namespace colo::costmodel
