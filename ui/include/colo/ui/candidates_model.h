#pragma once
/// \file
/// The candidates table: one row per costed plan (degrees, schedule, recompute, ZeRO, step time and the
/// likely range of the measured one, MFU, memory, fits or "at risk"; days, GPU-hours and cost under a
/// training budget), sortable by the numbers behind the
/// text and filterable by text and "fits only".

#include <QAbstractTableModel>
#include <QSortFilterProxyModel>

#include <vector>

#include "colo/costmodel/error_band.h"
#include "colo/planner/budget.h"
#include "colo/planner/search.h"

namespace colo::ui {

class CandidatesModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  // The figures first (a default window shows about ten columns), then the layout that gives them.
  enum Column {
    kRank, kStep, kLikely, kMfu, kMemory, kFits, kDays, kGpuHours, kCost, kRuns, kTp, kPp, kDp, kCp, kEp, kVpp, kMbs, kZero,
    kSchedule, kRecompute, kRankOrder, kTokens, kColumns
  };
  /// The role that sorts: the number behind a cell (seconds, bytes, ...).
  static constexpr int kSortRole = Qt::UserRole + 1;

  explicit CandidatesModel(QObject* parent = nullptr);
  /// Replaces the rows: the fitting plans best first, then the closest that did not fit.
  void setResult(const planner::SearchResult& result);
  void clear();
  /// The training budget the days, GPU-hours and cost columns are computed for ("-" without one).
  void setBudget(const planner::TrainingBudget& budget);
  [[nodiscard]] const planner::TrainingBudget& budget() const { return m_budget; }
  [[nodiscard]] const planner::Candidate& candidate(int row) const { return m_rows.at(static_cast<std::size_t>(row)); }
  [[nodiscard]] const std::vector<planner::Candidate>& candidates() const { return m_rows; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  std::vector<planner::Candidate> m_rows;
  std::vector<costmodel::PredictionBands> m_bands;  // per row, from the validated runs most like it
  planner::TrainingBudget m_budget;
};

/// Text filter over every column, and optionally only the plans that fit.
class CandidatesFilter : public QSortFilterProxyModel {
  Q_OBJECT
 public:
  explicit CandidatesFilter(QObject* parent = nullptr);
  void setFitsOnly(bool fitsOnly);
  [[nodiscard]] bool fitsOnly() const { return m_fitsOnly; }

 protected:
  bool filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const override;

 private:
  bool m_fitsOnly = false;
};

}  // namespace colo::ui
