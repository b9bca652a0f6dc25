#include "colo/ui/candidates_model.h"

#include "colo/core/rank_layout.h"
#include "colo/core/runnable.h"
#include "colo/core/units.h"
#include "colo/planner/baseline.h"

namespace colo::ui {

CandidatesModel::CandidatesModel(QObject* parent) : QAbstractTableModel(parent) {}

void CandidatesModel::setResult(const planner::SearchResult& result) {
  beginResetModel();
  m_rows = result.top;
  for (const auto& r : result.rejected) m_rows.push_back(r);
  m_bands.clear();
  for (const auto& r : m_rows) m_bands.push_back(costmodel::bandsOf(r.plan, r.evaluation));
  endResetModel();
}

void CandidatesModel::setBudget(const planner::TrainingBudget& budget) {
  m_budget = budget;
  if (!m_rows.empty()) emit dataChanged(index(0, kDays), index(rowCount() - 1, kCost));
}

void CandidatesModel::clear() {
  beginResetModel();
  m_rows.clear();
  m_bands.clear();
  endResetModel();
}

int CandidatesModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : static_cast<int>(m_rows.size()); }
int CandidatesModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : kColumns; }

QVariant CandidatesModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* names[kColumns] = {"#",  "step time", "likely", "MFU",      "peak memory", "fits",     "days",      "GPU-hours",
                                        "cost", "colo-run", "tp",    "pp",     "dp",          "cp",       "ep",        "vpp",
                                        "mbs",  "ZeRO",     "schedule", "recompute", "rank layout", "tokens/s"};
  return section >= 0 && section < kColumns ? QString(names[section]) : QVariant();
}

QVariant CandidatesModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || index.column() >= kColumns) return {};
  const planner::Candidate& c = m_rows[static_cast<std::size_t>(index.row())];
  const Plan& p = c.plan;
  const auto& e = c.evaluation;
  const costmodel::PredictionBands& bands = m_bands[static_cast<std::size_t>(index.row())];
  if (role == Qt::ToolTipRole) {
    if (index.column() == kLikely || index.column() == kFits) {
      std::string tip = "the measured value lies in this range of the prediction for the middle 80% of the validated runs most like this plan";
      if (bands.time) tip += "\nstep: " + bands.time->describe();
      if (bands.memory) tip += "\nmemory: " + bands.memory->describe();
      if (bands.memoryAtRisk(e)) tip += "\nat the top of the memory band the peak exceeds the GPU";
      return QString::fromStdString(tip);
    }
    if (index.column() == kRuns) {
      auto ok = checkRunnable(p);
      return QString::fromStdString(ok ? "colo-run executes this plan" : "colo-run cannot execute it: " + ok.error().message);
    }
    return QString::fromStdString(c.reason);
  }
  if (role == Qt::TextAlignmentRole) {
    return index.column() == kSchedule || index.column() == kRecompute ? QVariant(Qt::AlignLeft | Qt::AlignVCenter)
                                                                      : QVariant(Qt::AlignRight | Qt::AlignVCenter);
  }
  if (role != Qt::DisplayRole && role != kSortRole) return {};
  const bool sort = role == kSortRole;
  switch (index.column()) {
    case kRank: return index.row() + 1;
    case kTp: return static_cast<qlonglong>(p.parallel.tp);
    case kPp: return static_cast<qlonglong>(p.parallel.pp);
    case kDp: return static_cast<qlonglong>(p.parallel.dp);
    case kCp:
      // The exchange beside the degree when it is not the ring (sorted by the degree).
      if (sort || p.parallel.cp <= 1 || p.execution.cpCommType == CpCommType::kP2p) return static_cast<qlonglong>(p.parallel.cp);
      return QString::fromStdString(std::to_string(p.parallel.cp) + " " +
                                    cpExchangeLabel(p.execution.cpCommType, p.execution.hierarchicalCpSizes));
    case kEp: return static_cast<qlonglong>(p.parallel.ep);
    case kVpp: return static_cast<qlonglong>(p.parallel.virtualStages);
    case kMbs: return static_cast<qlonglong>(p.microBatchSize);
    case kZero: return p.zeroStage;
    case kSchedule: return QString::fromStdString(toString(p.schedule));
    case kRecompute: return QString::fromStdString(planner::recomputeSummary(p));
    case kStep: return sort ? QVariant(e.stepSeconds) : QVariant(QString::fromStdString(formatFixed(e.stepSeconds, 3) + " s"));
    case kLikely:
      if (!bands.time) return sort ? QVariant(0.0) : QVariant(QStringLiteral("-"));
      return sort ? QVariant(bands.time->high)
                  : QVariant(QString::fromStdString(bands.time->describe().substr(0, bands.time->describe().find(','))));
    case kTokens: return sort ? QVariant(e.tokensPerSecond) : QVariant(QString::fromStdString(formatCount(e.tokensPerSecond)));
    case kMfu: return sort ? QVariant(e.mfu) : QVariant(QString::fromStdString(formatFixed(100 * e.mfu, 1) + "%"));
    case kMemory: return sort ? QVariant(e.peakMemoryBytes) : QVariant(QString::fromStdString(formatBytes(e.peakMemoryBytes)));
    case kFits:
      if (sort) return QVariant(c.fits ? 1 : 0);
      return c.fits ? (bands.memoryAtRisk(e) ? QStringLiteral("at risk") : QStringLiteral("yes")) : QStringLiteral("no");
    case kRankOrder: return QString::fromStdString(rankOrderText(p.parallel));
    case kRuns: {
      const bool runs = runnable(p);
      return sort ? QVariant(runs ? 1 : 0) : QVariant(runs ? QStringLiteral("runs") : QStringLiteral("-"));
    }
    case kDays:
    case kGpuHours:
    case kCost: {
      if (!m_budget.enabled() || (index.column() == kCost && m_budget.pricePerGpuHour <= 0)) {
        return sort ? QVariant(0.0) : QVariant(QStringLiteral("-"));
      }
      const auto cost = planner::trainingCost(p, e, m_budget);
      if (index.column() == kDays) {
        return sort ? QVariant(cost.days)
                    : QVariant(QString::fromStdString(formatFixed(cost.days, cost.days < 10 ? 2 : 1) + (cost.meetsDeadline ? "" : " LATE")));
      }
      if (index.column() == kGpuHours) return sort ? QVariant(cost.gpuHours) : QVariant(QString::fromStdString(formatCount(cost.gpuHours)));
      return sort ? QVariant(cost.dollars) : QVariant(QString::fromStdString(planner::formatDollars(cost.dollars)));
    }
    default: return {};
  }
}

CandidatesFilter::CandidatesFilter(QObject* parent) : QSortFilterProxyModel(parent) {
  setSortRole(CandidatesModel::kSortRole);
  setFilterCaseSensitivity(Qt::CaseInsensitive);
  setFilterKeyColumn(-1);
}

void CandidatesFilter::setFitsOnly(bool fitsOnly) {
  m_fitsOnly = fitsOnly;
  invalidateFilter();
}

bool CandidatesFilter::filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const {
  if (m_fitsOnly) {
    const QModelIndex fits = sourceModel()->index(sourceRow, CandidatesModel::kFits, sourceParent);
    if (sourceModel()->data(fits, CandidatesModel::kSortRole).toInt() == 0) return false;
  }
  return QSortFilterProxyModel::filterAcceptsRow(sourceRow, sourceParent);
}

}  // namespace colo::ui
