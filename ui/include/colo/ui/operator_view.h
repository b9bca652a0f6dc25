#pragma once
// The Operators tab: the selected plan operator by operator (Megatron's split of its degrees, or a
// saved per-operator plan), and on request the joint per-operator solve of the same model and cluster
// (planner/autoparallel.h), as one tree per block with each operator's axes, layouts, collectives, time,
// memory and recompute choice; the axes are coloured by what they split.

#include <QFutureWatcher>
#include <QWidget>

#include "colo/core/error.h"
#include "colo/core/plan.h"
#include "colo/planner/autoparallel.h"

class QLabel;
class QPushButton;
class QTreeWidget;

namespace colo::ui {

class OperatorView : public QWidget {
  Q_OBJECT
 public:
  explicit OperatorView(QWidget* parent = nullptr);
  /// Shows `plan` per operator (computed here; a fraction of a second).
  void setPlan(const Plan& plan, double maxMemoryFraction);
  /// Starts the joint per-operator solve of the current plan's model and cluster in the background.
  void solveJoint();
  [[nodiscard]] QTreeWidget* tree() const { return m_tree; }
  [[nodiscard]] QString summary() const;
  [[nodiscard]] bool solving() const { return m_watcher.isRunning(); }

 signals:
  /// The joint solve finished (shown) or failed (its error shown in the summary).
  void jointSolved(bool ok);

 private:
  void show(const planner::OperatorPlan& plan, const QString& title);
  void onJointFinished();

  QLabel* m_summary;
  QPushButton* m_solve;
  QTreeWidget* m_tree;
  std::optional<Plan> m_plan;
  double m_fraction = 0.95;
  QFutureWatcher<Result<planner::AutoParallelResult>> m_watcher;
};

}  // namespace colo::ui
