// Device meshes, activation layouts and the collectives between layouts (colo/planner/sharding.h).
#include "colo/planner/sharding.h"

#include <charconv>
#include <cmath>
#include <limits>

namespace colo::planner {
namespace {

bool shards(AxisUse use) { return use == AxisUse::kBatch || use == AxisUse::kSeq || use == AxisUse::kFeature; }

std::string axisName(int axis) { return std::to_string(axis); }

}  // namespace

Layout Layout::fromIndex(int index) {
  Layout l;
  l.use[0] = static_cast<AxisUse>(index / kAxisUses);
  l.use[1] = static_cast<AxisUse>(index % kAxisUses);
  return l;
}

Layout gradientTarget(Layout layout) {
  for (auto& u : layout.use) {
    if (u == AxisUse::kPartial) u = AxisUse::kReplicate;
  }
  return layout;
}

std::int64_t DeviceMesh::size() const {
  std::int64_t n = 1;
  for (const auto s : shape) n *= s;
  return n;
}

costmodel::GroupPlacement DeviceMesh::group(int axis) const {
  if (static_cast<std::size_t>(axis) < placed.size()) return placed[static_cast<std::size_t>(axis)];
  // The inner axis takes consecutive ranks (the plan's tp position), the outer axis strides over it
  // (dp's position): the cost model places such groups on the cluster's link levels.
  Parallelism p;
  if (axes() == 1) {
    p.tp = shape[0];
    return costmodel::placeGroup(*cluster, p, costmodel::Dim::kTp);
  }
  p.dp = shape[0];
  p.tp = shape[1];
  return costmodel::placeGroup(*cluster, p, axis == 1 ? costmodel::Dim::kTp : costmodel::Dim::kDp);
}

std::string DeviceMesh::toString() const {
  std::string out;
  for (const auto s : shape) out += (out.empty() ? "" : "x") + std::to_string(s);
  return out;
}

Result<std::vector<std::int64_t>> parseMeshShape(const std::string& text, const std::string& option) {
  std::vector<std::int64_t> shape;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find('x', start), text.size());
    std::int64_t v = 0;
    const auto* first = text.data() + start;
    const auto* last = text.data() + end;
    const auto [ptr, ec] = std::from_chars(first, last, v);
    if (ec != std::errc{} || ptr != last || v <= 0) {
      return std::unexpected(Error::badInput(option + ": \"" + text + "\" is not a mesh shape (one or two positive sizes, e.g. 8 or 2x8)"));
    }
    shape.push_back(v);
    start = end + 1;
  }
  if (shape.empty() || shape.size() > 2) {
    return std::unexpected(Error::badInput(option + ": \"" + text + "\" is not a mesh shape (one or two positive sizes, e.g. 8 or 2x8)"));
  }
  return shape;
}

Result<DeviceMesh> makeMesh(const ClusterSpec& cluster, std::vector<std::int64_t> shape, const std::string& option) {
  DeviceMesh mesh;
  mesh.shape = std::move(shape);
  mesh.cluster = &cluster;
  const std::string label = option + " " + mesh.toString();
  if (mesh.shape.empty() || mesh.shape.size() > 2) return std::unexpected(Error::badInput(label + ": a mesh has one or two axes"));
  for (const auto s : mesh.shape) {
    if (s <= 0) return std::unexpected(Error::badInput(label + ": axis sizes must be positive"));
  }
  const std::int64_t gpus = cluster.totalGpus();
  if (gpus % mesh.size() != 0) {
    return std::unexpected(Error::badInput(label + ": " + std::to_string(mesh.size()) + " GPUs do not divide the cluster's " +
                                           std::to_string(gpus) + " (the mesh is one pipeline stage)"));
  }
  const std::int64_t gpn = cluster.gpusPerNode;
  const std::int64_t inner = mesh.shape.back();
  if (inner <= gpn ? gpn % inner != 0 : inner % gpn != 0) {
    return std::unexpected(Error::badInput(label + ": the inner axis (" + std::to_string(inner) +
                                           ") must divide a node's " + std::to_string(gpn) + " GPUs or span whole nodes"));
  }
  for (int a = 0; a < mesh.axes(); ++a) mesh.placed.push_back(mesh.group(a));
  return mesh;
}

bool fits(Layout layout, const TensorDims& dims, std::int64_t samples, const DeviceMesh& mesh) {
  std::int64_t b = 1, s = 1, f = 1;
  for (int a = 0; a < 2; ++a) {
    const AxisUse u = layout.use[static_cast<std::size_t>(a)];
    if (a >= mesh.axes()) {
      if (u != AxisUse::kReplicate) return false;
      continue;
    }
    const std::int64_t n = mesh.axisSize(a);
    if (n == 1 && u != AxisUse::kReplicate) return false;  // one member: every use is the same
    if (u == AxisUse::kBatch) b *= n;
    if (u == AxisUse::kSeq) s *= n;
    if (u == AxisUse::kFeature) f *= n;
  }
  if (samples % b != 0 || dims.s % s != 0) return false;
  if (dims.featureGrain == 0) return true;  // padded to any split (a vocabulary)
  return (dims.f / dims.featureGrain) % f == 0;
}

double localBytes(Layout layout, double bytes, const DeviceMesh& mesh) {
  for (int a = 0; a < mesh.axes(); ++a) {
    if (shards(layout.use[static_cast<std::size_t>(a)])) bytes /= static_cast<double>(mesh.axisSize(a));
  }
  return bytes;
}

std::size_t LayoutConverter::KeyHash::operator()(const Key& k) const noexcept {
  // Mixes each field into a 64-bit state (the constant is the golden ratio's, as in boost::hash_combine).
  std::uint64_t h = 0;
  for (const std::int64_t v : {k.dims.s, k.dims.f, k.dims.featureGrain, k.dims.elementBytes, k.samples}) {
    h ^= static_cast<std::uint64_t>(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  }
  return static_cast<std::size_t>(h);
}

LayoutConverter::Table& LayoutConverter::table(const TensorDims& dims, std::int64_t samples) {
  auto& slot = m_tables[Key{dims, samples}];
  if (!slot) slot.reset(new Table(*this, dims, samples));
  return *slot;
}

const Conversion& LayoutConverter::Table::get(Layout from, Layout to) {
  auto& cell = m_cells[static_cast<std::size_t>(from.index() * kLayouts + to.index())];
  if (!cell) {
    cell = std::make_unique<Conversion>(m_owner->compute(from, to, m_dims, m_samples));
    ++m_owner->m_computed;
  }
  return *cell;
}

Conversion LayoutConverter::compute(Layout from, Layout to, const TensorDims& dims, std::int64_t samples) const {
  using costmodel::Collective;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const double full = dims.bytes(samples);
  // A candidate sequence: its time and its steps (collective, axis); only the cheapest is written out.
  struct Candidate {
    double seconds = 0;
    std::array<std::pair<const char*, int>, 2> steps{};
    int count = 0;
  };
  Candidate best{kInf, {}, 0};
  // One step per axis that changes; try both orders (gathering after another axis has sliced moves fewer bytes).
  for (int order = 0; order < 2; ++order) {
    Layout at = from;
    Candidate c;
    for (int i = 0; i < 2 && c.seconds < kInf; ++i) {
      const int a = order == 0 ? i : 1 - i;
      const auto ua = static_cast<std::size_t>(a);
      const AxisUse x = at.use[ua];
      const AxisUse y = to.use[ua];
      if (x == y) continue;
      Layout next = at;
      next.use[ua] = y;
      if (!fits(next, dims, samples, m_mesh) && !(y == AxisUse::kReplicate || y == AxisUse::kPartial)) {
        c.seconds = kInf;
        break;
      }
      const double here = localBytes(at, full, m_mesh);
      auto add = [&](Collective kind, double bytes, const char* label) {
        c.seconds += costmodel::collectiveSeconds(kind, bytes, m_mesh.group(a));
        c.steps[static_cast<std::size_t>(c.count++)] = {label, a};
      };
      if (y == AxisUse::kPartial) {
        c.seconds = kInf;  // nothing turns a whole tensor into partial sums
      } else if (x == AxisUse::kPartial) {
        if (y == AxisUse::kReplicate) add(Collective::kAllReduce, here, "all-reduce");
        else add(Collective::kReduceScatter, here, "reduce-scatter");
      } else if (x == AxisUse::kReplicate) {
        // A local slice: no communication.
      } else if (y == AxisUse::kReplicate) {
        add(Collective::kAllGather, here * static_cast<double>(m_mesh.axisSize(a)), "all-gather");
      } else {
        add(Collective::kAllToAll, here, "all-to-all");
      }
      at = next;
    }
    if (c.seconds < best.seconds) best = c;
  }
  Conversion out{best.seconds, {}, 0};
  if (best.seconds == kInf) return out;
  for (int k = 0; k < best.count; ++k) {
    const auto& [label, axis] = best.steps[static_cast<std::size_t>(k)];
    out.steps += (out.steps.empty() ? "" : " > ") + std::string(label) + "(" + axisName(axis) + ")";
  }
  out.collectives = best.count;
  return out;
}

std::string toString(Layout layout, int axes) {
  std::array<std::string, 3> dims{"", "", ""};
  std::string partial;
  for (int a = 0; a < axes && a < 2; ++a) {
    const AxisUse u = layout.use[static_cast<std::size_t>(a)];
    const std::string n = std::to_string(a);
    if (u == AxisUse::kBatch) dims[0] += n;
    if (u == AxisUse::kSeq) dims[1] += n;
    if (u == AxisUse::kFeature) dims[2] += n;
    if (u == AxisUse::kPartial) partial += n;
  }
  std::string out = "[";
  for (std::size_t d = 0; d < 3; ++d) out += (d ? ", " : "") + (dims[d].empty() ? std::string("R") : "S" + dims[d]);
  out += "]";
  if (!partial.empty()) out += " P" + partial;
  return out;
}

}  // namespace colo::planner
