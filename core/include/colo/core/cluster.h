#pragma once
/// \file
/// ClusterSpec: the machines a plan runs on. Nodes of identical GPUs joined by link levels, from the
/// innermost (NVLink inside a node) to the outermost (the network across nodes), plus the host
/// memory, PCIe and NVMe that offload uses. File format `colo.cluster/1` (docs/formats.md); units are
/// in the JSON key names.

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "colo/core/error.h"
#include "colo/core/json.h"

namespace colo {

/// Numeric precisions a GPU has a peak for.
/// kFp4: 4-bit floating point GEMMs (NVFP4, MXFP4) through Transformer Engine; like kFp8, activations and
/// everything but the linear layers' operands stay at 16 bits.
enum class DType { kFp32, kTf32, kFp16, kBf16, kFp8, kFp4 };

[[nodiscard]] std::string toString(DType dtype);
/// Parses "fp32", "tf32", "fp16", "bf16", "fp8", "fp4". Errors: kBadInput listing the choices.
[[nodiscard]] Result<DType> parseDType(const std::string& name);
/// fp8 and fp4: Transformer Engine's quantised GEMM operands, everything else at 16 bits.
[[nodiscard]] inline bool quantizedGemms(DType dtype) { return dtype == DType::kFp8 || dtype == DType::kFp4; }
/// Bytes per element (tf32 is stored as fp32; fp4, packed two to a byte with its block scales, counts a byte).
[[nodiscard]] std::int64_t bytesPerElement(DType dtype);

struct GpuSpec {
  std::string name;                                ///< e.g. "A100-SXM4-80GB"
  double memoryBytes = 0;                          ///< device memory
  std::map<DType, double> peakFlopsPerSecond;      ///< dense peak per precision
  double hbmBytesPerSecond = 0;                    ///< device memory bandwidth
  [[nodiscard]] bool hasPeak(DType dtype) const { return peakFlopsPerSecond.contains(dtype); }
  friend bool operator==(const GpuSpec&, const GpuSpec&) = default;
};

/// What a link level is made of; decides which collective algorithms suit it.
enum class LinkKind { kNvSwitch, kNvLink, kHybridCubeMesh, kPcie, kInfiniBand, kRoce, kEthernet };
[[nodiscard]] std::string toString(LinkKind kind);
/// Whether a link level joins nodes (InfiniBand, RoCE, Ethernet) rather than GPUs inside a node.
[[nodiscard]] bool isNetwork(LinkKind kind);

/// One collective's own measured figures on a link level: NCCL's algorithms and protocols reach a
/// different share of the link, and pay a different per-step and fixed cost, for an all-reduce, an
/// all-gather, a reduce-scatter and an all-to-all (nccl-tests sweeps fitted per collective).
struct CollectiveFit {
  std::string collective;       ///< all_reduce, all_gather, reduce_scatter or all_to_all
  double efficiency = 0;        ///< share of the level's bytesPerSecond, in (0, 1]
  double latencySeconds = 0;    ///< per algorithm step
  double launchSeconds = 0;     ///< per collective
  friend bool operator==(const CollectiveFit&, const CollectiveFit&) = default;
};

/// The collectives a CollectiveFit may name.
inline constexpr std::array<std::string_view, 4> kFittedCollectives = {"all_reduce", "all_gather", "reduce_scatter",
                                                                       "all_to_all"};

/// One level of the interconnect. A level joins groups of `spanGpus` consecutive GPUs (rank order);
/// the outermost level spans the whole cluster.
struct LinkLevel {
  std::string name;               ///< e.g. "nvlink", "network"
  LinkKind kind = LinkKind::kNvSwitch;
  std::int64_t spanGpus = 0;      ///< GPUs joined by this level (0 in a file: the whole cluster)
  double bytesPerSecond = 0;      ///< per GPU, per direction
  double latencySeconds = 0;      ///< one message, end to end (a collective pays it per algorithm step)
  /// Measured share of `bytesPerSecond` that NCCL's collectives reach on this level (nccl-tests bus
  /// bandwidth over the nominal rate); 0: the documented default of the link kind.
  double efficiency = 0;
  /// Fixed cost of one collective on this level whatever its size or group (kernel launch, channel and
  /// proxy setup), on top of the per-step latency; measured with nccl-tests-style sweeps.
  double launchSeconds = 0;
  /// Per-collective figures that replace efficiency, latency and launch for that collective (the
  /// level's own stay for the others and for point-to-point sends).
  std::vector<CollectiveFit> collectives;
  /// The fit for `collective`, if the level has one.
  [[nodiscard]] const CollectiveFit* fitFor(std::string_view collective) const {
    for (const auto& f : collectives) {
      if (f.collective == collective) return &f;
    }
    return nullptr;
  }
  friend bool operator==(const LinkLevel&, const LinkLevel&) = default;
};

struct ClusterSpec {
  std::string name;
  std::string source;             ///< where the figures come from (optional)
  std::int64_t nodes = 1;
  std::int64_t gpusPerNode = 1;
  /// GPUs per host (what a scheduler and torchrun call a node), when a node's NVLink domain spans
  /// several hosts (GB200/GB300 NVL72: 72 GPUs, compute trays of 4); 0: the node is one host. Such a
  /// domain is allocated by hosts, so a job may take part of it (scaleCluster).
  std::int64_t gpusPerHost = 0;
  GpuSpec gpu;
  std::vector<LinkLevel> links;   ///< innermost first
  double hostMemoryBytes = 0;     ///< per node, for CPU offload
  double pcieBytesPerSecond = 0;  ///< host<->device per GPU, per direction
  double nvmeBytesPerSecond = 0;  ///< per node, for NVMe offload (0: no NVMe)
  double nvmeCapacityBytes = 0;   ///< per node

  [[nodiscard]] std::int64_t totalGpus() const { return nodes * gpusPerNode; }
  /// GPUs per host: gpusPerHost when set, else a node is one host.
  [[nodiscard]] std::int64_t hostGpus() const { return gpusPerHost > 0 ? gpusPerHost : gpusPerNode; }
  /// The innermost level that joins GPUs `a` and `b` (global ranks in node-major order); the last
  /// level when they are in different nodes.
  [[nodiscard]] const LinkLevel& levelBetween(std::int64_t a, std::int64_t b) const;
  friend bool operator==(const ClusterSpec&, const ClusterSpec&) = default;
};

/// Checks consistency: spans grow outward and divide each other, in-node levels stay in a node, a
/// multi-node cluster has a network level, bandwidths positive. `file` labels errors.
[[nodiscard]] Result<void> validateCluster(const ClusterSpec& cluster, const std::string& file = {});

/// The same cluster with `gpus` GPUs: fewer than a node keeps one partial node, otherwise `gpus` must
/// be a multiple of gpusPerNode and the node count changes. Errors: kBadInput with the reason.
[[nodiscard]] Result<ClusterSpec> scaleCluster(const ClusterSpec& cluster, std::int64_t gpus);

/// Reads a `colo.cluster/1` document (unknown fields rejected). Errors name file, pointer, value.
[[nodiscard]] Result<ClusterSpec> clusterFromJson(const Json& document, const std::string& file);
/// Writes a `colo.cluster/1` document that reads back equal.
[[nodiscard]] Json clusterToJson(const ClusterSpec& cluster);

}  // namespace colo
