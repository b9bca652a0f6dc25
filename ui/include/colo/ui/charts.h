#pragma once
/// \file
/// The pictures: the Pareto front of step time against peak memory (click a point to select its plan),
/// each pipeline stage's memory against the GPU's capacity, the loss curve of a run, the pipeline
/// timeline from the simulator's events, and the device mesh of a plan.

#include <QChartView>
#include <QLineSeries>
#include <QWidget>

#include <vector>

#include "colo/costmodel/timeline.h"
#include "colo/planner/search.h"

namespace colo::ui {

class ParetoChart : public QChartView {
  Q_OBJECT
 public:
  explicit ParetoChart(QWidget* parent = nullptr);
  /// Points for `candidates` (index = row of the candidates model); `selected` is highlighted.
  void setCandidates(const std::vector<planner::Candidate>& candidates, int selected);
  /// The candidate whose point is nearest to `value` (chart coordinates), or -1.
  [[nodiscard]] int nearest(const QPointF& value) const;

 signals:
  void candidateClicked(int index);

 private:
  std::vector<QPointF> m_points;  // (peak memory GiB, step time s) per candidate
};

class MemoryChart : public QChartView {
  Q_OBJECT
 public:
  explicit MemoryChart(QWidget* parent = nullptr);
  /// Stacked memory per stage, with the GPU's capacity and, when `budgetFraction` is below 1, the budget
  /// a plan is judged to fit under (that share of the capacity) as lines across.
  void setEvaluation(const costmodel::Evaluation& evaluation, double budgetFraction = 1.0);
};

class LossChart : public QChartView {
  Q_OBJECT
 public:
  explicit LossChart(QWidget* parent = nullptr);
  void clear();
  void addLoss(int step, double loss);
  [[nodiscard]] int points() const;

 private:
  QLineSeries* m_series = nullptr;
  double m_max = 0, m_min = 1e300;
  int m_steps = 0;
};

class TimelineView : public QWidget {
  Q_OBJECT
 public:
  explicit TimelineView(QWidget* parent = nullptr);
  /// Draws `timeline` (each event's recompute and exposed communication shaded inside it); later
  /// virtual chunks of a stage are drawn lighter.
  /// `stepSeconds` (the plan's whole step, when known) is said beside the timeline's makespan: the step
  /// adds what follows the last backward (exposed gradient reduction, the optimizer step).
  void setTimeline(const costmodel::Timeline& timeline, std::int64_t virtualStages, double stepSeconds = 0);
  [[nodiscard]] const costmodel::Timeline& timeline() const { return m_timeline; }
  QSize sizeHint() const override { return {800, 300}; }

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  costmodel::Timeline m_timeline;
  std::int64_t m_virtualStages = 1;
  double m_stepSeconds = 0;
};

class MeshView : public QWidget {
  Q_OBJECT
 public:
  explicit MeshView(QWidget* parent = nullptr);
  void setPlan(const Plan& plan);
  QSize sizeHint() const override { return {800, 300}; }
  /// "node 3, GPU 5: tp 5 dp 0 pp 2" for the GPU at this widget position, or empty.
  [[nodiscard]] QString describe(const QPoint& at) const;

 protected:
  void paintEvent(QPaintEvent* event) override;
  bool event(QEvent* event) override;

 private:
  [[nodiscard]] QRect cell(std::int64_t gpu) const;
  Plan m_plan;
  bool m_valid = false;
};

}  // namespace colo::ui
