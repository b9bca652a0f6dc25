// What the operator-level solver reads while it solves a block, formed once per block and mesh: each
// unit's strategies and their figures, its inputs' conversion tables, the gradient reductions and
// which unit last uses or keeps each tensor (autoparallel_solver.h, BlockSolver). The dynamic
// programme that reads them is autoparallel_solver.cpp.
#include "autoparallel_solver.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace colo::planner::detail {
namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

BlockSolver::BlockSolver(const Block& block, const CostContext& context, LayoutConverter& converter)
    : m_block(&block), m_context(context), m_converter(&converter) {
  const std::size_t n = block.units.size();
  m_strategies.resize(n);
  m_inputDims.resize(n);
  m_inputShare.resize(n);
  m_inputBytes.resize(n);
  m_hot.resize(n);
  m_convFwd.resize(n);
  m_convBwd.resize(n);
  m_convOps.resize(n);
  m_syncSeconds.resize(n);
  for (int l = 0; l < kLayouts; ++l) m_share[static_cast<std::size_t>(l)] = localBytes(Layout::fromIndex(l), 1.0, *context.mesh);
  for (int l = 0; l < kLayouts; ++l) m_partial[static_cast<std::size_t>(l)] = Layout::fromIndex(l).partial();
  for (std::size_t u = 0; u < n; ++u) {
    readInputs(u);
    costStrategies(u);
    fillConversions(u);
  }
  findUses();
}

void BlockSolver::readInputs(std::size_t u) {
  const Unit& unit = m_block->units[u];
  for (const int input : unit.inputs) {
    m_inputDims[u].push_back(input < 0 ? m_block->input : m_block->units[static_cast<std::size_t>(input)].out);
  }
  double total = 0;
  for (const auto& d : m_inputDims[u]) total += d.bytes(1);
  for (const auto& d : m_inputDims[u]) m_inputShare[u].push_back(total > 0 ? d.bytes(1) / total : 0.0);
  for (const auto& d : m_inputDims[u]) m_inputBytes[u].push_back(d.bytes(m_context.samples));
  if (unit.inputs.size() > 9) throw std::logic_error("unit " + unit.name + " has more than 9 inputs");
}

void BlockSolver::costStrategies(std::size_t u) {
  const Unit& unit = m_block->units[u];
  m_strategies[u] = detail::strategies(unit, m_inputDims[u], m_context);
  if (m_strategies[u].empty()) throw std::logic_error("unit " + unit.name + " has no strategy");
  for (const auto& st : m_strategies[u]) {
    m_hot[u].push_back({st.fwd + st.bwd, st.commFwd + st.commBwd, st.fwd + st.commFwd, st.inputSaved, st.ownSaved,
                        m_share[static_cast<std::size_t>(st.in.index())], st.out.index() << 1});
  }
  for (const auto& st : m_strategies[u]) {
    m_syncSeconds[u].push_back(gradientSyncSeconds(*m_context.mesh, st.syncBytes, m_context.replicas,
                                                   st.stateParams * static_cast<double>(m_context.dtypeBytes)));
  }
}

void BlockSolver::fillConversions(std::size_t u) {
  const std::size_t inputs = m_block->units[u].inputs.size();
  const std::size_t count = m_strategies[u].size();
  m_convFwd[u].assign(inputs, std::vector<std::array<float, kLayouts>>(count));
  m_convBwd[u].assign(inputs, std::vector<std::array<float, kLayouts>>(count));
  m_convOps[u].assign(inputs, std::vector<std::array<std::uint8_t, kLayouts>>(count));
  for (std::size_t i = 0; i < inputs; ++i) {
    // Many strategies read the same layout: the input's table of conversions is looked up once.
    std::array<bool, kLayouts> fitsFrom{};
    for (int l = 0; l < kLayouts; ++l) {
      fitsFrom[static_cast<std::size_t>(l)] = fits(Layout::fromIndex(l), m_inputDims[u][i], m_context.samples, *m_context.mesh);
    }
    LayoutConverter::Table& table = m_converter->table(m_inputDims[u][i], m_context.samples);
    for (std::size_t s = 0; s < count; ++s) {
      const Strategy& st = m_strategies[u][s];
      for (int l = 0; l < kLayouts; ++l) {
        const auto at = static_cast<std::size_t>(l);
        const Layout from = Layout::fromIndex(l);
        if (!fitsFrom[at]) {
          m_convFwd[u][i][s][at] = static_cast<float>(kInf);
          m_convBwd[u][i][s][at] = static_cast<float>(kInf);
          continue;
        }
        // Forward: the producer's layout to the one this strategy reads. Backward: the gradient this
        // strategy produces to the layout of the producer's gradient.
        const Conversion& f = table.get(from, st.in);
        const Conversion& b = table.get(st.gradIn, gradientTarget(from));
        m_convFwd[u][i][s][at] = static_cast<float>(f.seconds);
        m_convBwd[u][i][s][at] = static_cast<float>(b.seconds);
        m_convOps[u][i][s][at] = static_cast<std::uint8_t>(f.collectives + b.collectives);
      }
    }
  }
}

void BlockSolver::findUses() {
  const auto& units = m_block->units;
  const std::size_t n = units.size();
  // Last consumer of every tensor: index 0 is the block input, u + 1 the output of unit u. The final
  // unit's output outlives the block.
  m_lastUse.assign(n + 1, -1);
  for (std::size_t u = 0; u < n; ++u) {
    for (const int input : units[u].inputs) m_lastUse[static_cast<std::size_t>(input + 1)] = static_cast<int>(u);
  }
  if (n > 0) m_lastUse[n] = static_cast<int>(n);
  m_inputKept.resize(n);
  for (std::size_t c = 0; c < n; ++c) {
    m_inputKept[c].assign(units[c].inputs.size(), {0.0, 0.0});
    for (std::size_t i = 0; i < units[c].inputs.size(); ++i) {
      for (const auto& st : m_strategies[c]) {
        const double saved = st.inputSaved * m_inputShare[c][i];
        const double whole = m_inputDims[c][i].bytes(m_context.samples) * m_share[static_cast<std::size_t>(st.in.index())];
        m_inputKept[c][i][0] = std::max(m_inputKept[c][i][0], saved);
        m_inputKept[c][i][1] = std::max({m_inputKept[c][i][1], saved, whole});
      }
    }
  }
  m_lastSaver.assign(n + 1, -1);
  for (std::size_t u = 0; u < n; ++u) {
    if (units[u].inputSaved <= 0) continue;
    for (const int input : units[u].inputs) m_lastSaver[static_cast<std::size_t>(input + 1)] = static_cast<int>(u);
  }
}

const Conversion& BlockSolver::conversion(std::size_t unit, std::size_t input, std::size_t s, Layout from) const {
  return m_converter->convert(from, m_strategies[unit][s].in, m_inputDims[unit][input], m_context.samples);
}

double gradientSyncSeconds(const DeviceMesh& mesh, const double syncBytes[3], std::int64_t replicas, double heldBytes) {
  using costmodel::Collective;
  if (replicas > 1) {
    // Ranks `outer` copies `inner` apart (the mesh innermost, then the replicas: the pipeline stages
    // lie beyond both and do not move these groups).
    auto across = [&](std::int64_t inner, std::int64_t outer) {
      Parallelism par;
      par.tp = inner;
      par.dp = outer;
      return costmodel::placeGroup(*mesh.cluster, par, costmodel::Dim::kDp);
    };
    const std::int64_t inner = mesh.axes() > 1 ? mesh.axisSize(1) : 1;
    const auto outerAndReplicas = across(inner, mesh.axisSize(0) * replicas);
    const auto replicasOnly = across(mesh.size(), replicas);
    auto viaInner = [&](double bytes, const costmodel::GroupPlacement& shardGroup) {
      if (bytes <= 0 || mesh.axes() < 2) return 0.0;
      const auto g = mesh.group(1);
      return costmodel::collectiveSeconds(Collective::kReduceScatter, bytes, g) +
             costmodel::collectiveSeconds(Collective::kAllReduce, bytes / static_cast<double>(inner), shardGroup) +
             costmodel::collectiveSeconds(Collective::kAllGather, bytes, g);
    };
    const double unreduced = std::max(0.0, heldBytes - syncBytes[0] - syncBytes[1] - syncBytes[2]);
    return costmodel::collectiveSeconds(Collective::kAllReduce, syncBytes[0], outerAndReplicas) +
           viaInner(syncBytes[1], replicasOnly) + viaInner(syncBytes[2], outerAndReplicas) +
           costmodel::collectiveSeconds(Collective::kAllReduce, unreduced, replicasOnly);
  }
  double t = 0;
  for (int a = 0; a < mesh.axes(); ++a) {
    t += costmodel::collectiveSeconds(costmodel::Collective::kAllReduce, syncBytes[a], mesh.group(a));
  }
  if (syncBytes[2] > 0) {
    // Both axes: reduce inside the inner axis, then across the outer one on the reduced shards.
    t += costmodel::collectiveSeconds(costmodel::Collective::kReduceScatter, syncBytes[2], mesh.group(1)) +
         costmodel::collectiveSeconds(costmodel::Collective::kAllReduce, syncBytes[2] / static_cast<double>(mesh.axisSize(1)),
                                      mesh.group(0)) +
         costmodel::collectiveSeconds(costmodel::Collective::kAllGather, syncBytes[2], mesh.group(1));
  }
  return t;
}

}  // namespace colo::planner::detail
