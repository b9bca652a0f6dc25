#pragma once
/// \file
/// The vocabulary of operator-level auto-parallelism: a logical device mesh over the GPUs of one
/// pipeline stage, the layout (sharding spec) of an activation on it, and the cheapest collectives that
/// turn one layout into another (Colossal-AI's shape-consistency manager), cached.
///
/// Every activation of a transformer is treated as a tensor of logical shape [b, s, f] (samples, tokens,
/// features). A layout says, for each mesh axis, which of those dimensions the axis splits, or that the
/// tensor holds partial sums over that axis (a row-parallel product before its reduction). Printed in
/// Colossal-AI's notation: `[S0, R, S1]` splits b over axis 0 and f over axis 1, `[S01, R, R]` splits b
/// over both, `P1` marks partial sums over axis 1.

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "colo/core/cluster.h"
#include "colo/core/error.h"
#include "colo/costmodel/collectives.h"

namespace colo::planner {

/// What one mesh axis does to an activation.
enum class AxisUse : std::uint8_t { kReplicate, kBatch, kSeq, kFeature, kPartial };
inline constexpr int kAxisUses = 5;

/// A tensor's layout on a mesh of one or two axes (a 1-D mesh leaves the second axis replicated).
struct Layout {
  std::array<AxisUse, 2> use{AxisUse::kReplicate, AxisUse::kReplicate};
  [[nodiscard]] int index() const { return static_cast<int>(use[0]) * kAxisUses + static_cast<int>(use[1]); }
  [[nodiscard]] static Layout fromIndex(int index);
  [[nodiscard]] bool partial() const { return use[0] == AxisUse::kPartial || use[1] == AxisUse::kPartial; }
  friend bool operator==(const Layout&, const Layout&) = default;
};
inline constexpr int kLayouts = kAxisUses * kAxisUses;

/// The layout of a tensor's gradient when the tensor has `layout` forward: partial sums are consumed
/// whole by every member, so their gradient is replicated.
[[nodiscard]] Layout gradientTarget(Layout layout);

/// The logical size of one activation for one sample: tokens `s`, features `f`; `featureGrain` is the
/// width a feature split must keep together (a head's width for attention's inputs, else 1; 0 for a
/// vocabulary, padded to whatever split).
struct TensorDims {
  std::int64_t s = 0;
  std::int64_t f = 0;
  std::int64_t featureGrain = 1;
  std::int64_t elementBytes = 2;
  [[nodiscard]] double bytes(std::int64_t samples) const {
    return static_cast<double>(samples) * static_cast<double>(s) * static_cast<double>(f) *
           static_cast<double>(elementBytes);
  }
  friend auto operator<=>(const TensorDims&, const TensorDims&) = default;
};

/// A logical mesh over the first size() GPUs of the cluster: shape {n} or {outer, inner}, the last
/// axis innermost (consecutive ranks, inside a node where it fits).
struct DeviceMesh {
  std::vector<std::int64_t> shape;
  const ClusterSpec* cluster = nullptr;
  /// group(0) and group(1) as makeMesh placed them (the solver asks for them in its inner loops);
  /// empty for a mesh built otherwise, whose group() places the group on each call.
  std::vector<costmodel::GroupPlacement> placed;
  [[nodiscard]] int axes() const { return static_cast<int>(shape.size()); }
  [[nodiscard]] std::int64_t axisSize(int axis) const { return axis < axes() ? shape[static_cast<std::size_t>(axis)] : 1; }
  [[nodiscard]] std::int64_t size() const;
  /// Where the members of one group along `axis` sit (for the cost model's collectives).
  [[nodiscard]] costmodel::GroupPlacement group(int axis) const;
  /// "8" or "2x8".
  [[nodiscard]] std::string toString() const;
};

/// Checks the shape against the cluster: one or two positive axes whose product divides its GPUs, an
/// inner axis that fits in a node or spans whole nodes. Errors: kBadInput naming `option` and the value.
[[nodiscard]] Result<DeviceMesh> makeMesh(const ClusterSpec& cluster, std::vector<std::int64_t> shape,
                                          const std::string& option = "--mesh");
/// "2x8" -> {2, 8}. Errors: kBadInput naming `option`.
[[nodiscard]] Result<std::vector<std::int64_t>> parseMeshShape(const std::string& text, const std::string& option = "--mesh");

/// Whether `layout` splits a tensor of `dims` for `samples` samples evenly on `mesh` (and uses no axis
/// the mesh lacks).
[[nodiscard]] bool fits(Layout layout, const TensorDims& dims, std::int64_t samples, const DeviceMesh& mesh);

/// Bytes one GPU holds of a tensor in `layout`.
[[nodiscard]] double localBytes(Layout layout, double bytes, const DeviceMesh& mesh);

/// The collectives that turn a tensor from one layout into another, in order, and their time.
struct Conversion {
  double seconds = 0;          ///< +infinity when no sequence of collectives does it (a replicated tensor cannot become partial)
  std::string steps;           ///< e.g. "all-gather(1) > all-to-all(0)"; empty when nothing moves
  std::int64_t collectives = 0;
};

/// Cheapest conversions, per axis one step (all-gather, all-to-all, all-reduce, reduce-scatter, or a free
/// local slice), in whichever axis order costs least; cached per (tensor, samples) in a table of every
/// (from, to) pair, each computed when first asked for.
class LayoutConverter {
 public:
  /// The conversions of one tensor: a caller converting it many times looks the table up once.
  class Table {
   public:
    [[nodiscard]] const Conversion& get(Layout from, Layout to);

   private:
    friend class LayoutConverter;
    Table(LayoutConverter& owner, const TensorDims& dims, std::int64_t samples)
        : m_owner(&owner), m_dims(dims), m_samples(samples), m_cells(static_cast<std::size_t>(kLayouts * kLayouts)) {}
    LayoutConverter* m_owner;
    TensorDims m_dims;
    std::int64_t m_samples;
    std::vector<std::unique_ptr<Conversion>> m_cells;  // [from * kLayouts + to]; stable once computed
  };

  explicit LayoutConverter(const DeviceMesh& mesh) : m_mesh(mesh) {}
  // Its tables point back at it: it stays where it was made.
  LayoutConverter(const LayoutConverter&) = delete;
  LayoutConverter& operator=(const LayoutConverter&) = delete;
  [[nodiscard]] const Conversion& convert(Layout from, Layout to, const TensorDims& dims, std::int64_t samples) {
    return table(dims, samples).get(from, to);
  }
  /// The table of one tensor (stable: it lives as long as the converter).
  [[nodiscard]] Table& table(const TensorDims& dims, std::int64_t samples);
  [[nodiscard]] const DeviceMesh& mesh() const { return m_mesh; }
  /// Conversions computed so far.
  [[nodiscard]] std::size_t cached() const { return m_computed; }

 private:
  [[nodiscard]] Conversion compute(Layout from, Layout to, const TensorDims& dims, std::int64_t samples) const;
  struct Key {
    TensorDims dims;
    std::int64_t samples = 0;
    friend bool operator==(const Key&, const Key&) = default;
  };
  struct KeyHash {
    [[nodiscard]] std::size_t operator()(const Key& k) const noexcept;
  };
  DeviceMesh m_mesh;
  std::unordered_map<Key, std::unique_ptr<Table>, KeyHash> m_tables;
  std::size_t m_computed = 0;
};

/// Colossal-AI's notation of a layout over [b, s, f] on a mesh of `axes` axes: "[S0, R, S1]", "[R, R, R] P1".
[[nodiscard]] std::string toString(Layout layout, int axes = 2);

}  // namespace colo::planner
