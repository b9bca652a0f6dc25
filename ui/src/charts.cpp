#include "colo/ui/charts.h"

#include <QBarCategoryAxis>
#include <QBarSet>
#include <QHelpEvent>
#include <QPainter>
#include <QScatterSeries>
#include <QStackedBarSeries>
#include <QToolTip>
#include <QValueAxis>

#include <algorithm>
#include <cmath>

#include "colo/core/rank_layout.h"
#include "colo/core/units.h"

namespace colo::ui {
namespace {

QChart* newChart(const QString& title) {
  auto* chart = new QChart();
  chart->setTitle(title);
  chart->legend()->setAlignment(Qt::AlignBottom);
  chart->setMargins(QMargins(4, 4, 4, 4));
  return chart;
}

QValueAxis* axis(const QString& title, double lo, double hi) {
  auto* a = new QValueAxis();
  a->setTitleText(title);
  a->setRange(lo, hi);
  a->setLabelFormat("%.3g");
  return a;
}

}  // namespace

ParetoChart::ParetoChart(QWidget* parent) : QChartView(newChart("Step time vs peak memory per GPU"), parent) {
  setRenderHint(QPainter::Antialiasing);
  setMinimumSize(360, 260);
}

int ParetoChart::nearest(const QPointF& value) const {
  int best = -1;
  double bestDistance = 0;
  const QRectF area = chart()->plotArea();
  auto* x = chart()->axes(Qt::Horizontal).isEmpty() ? nullptr : qobject_cast<QValueAxis*>(chart()->axes(Qt::Horizontal).first());
  auto* y = chart()->axes(Qt::Vertical).isEmpty() ? nullptr : qobject_cast<QValueAxis*>(chart()->axes(Qt::Vertical).first());
  const double sx = x ? area.width() / std::max(1e-12, x->max() - x->min()) : 1.0;
  const double sy = y ? area.height() / std::max(1e-12, y->max() - y->min()) : 1.0;
  for (std::size_t i = 0; i < m_points.size(); ++i) {
    const double dx = (m_points[i].x() - value.x()) * sx, dy = (m_points[i].y() - value.y()) * sy;
    const double d = dx * dx + dy * dy;
    if (best < 0 || d < bestDistance) {
      best = static_cast<int>(i);
      bestDistance = d;
    }
  }
  return best;
}

void ParetoChart::setCandidates(const std::vector<planner::Candidate>& candidates, int selected) {
  QChart* chart = newChart("Step time vs peak memory (click a point)");
  m_points.clear();
  auto* fits = new QScatterSeries();
  fits->setName("fits");
  fits->setMarkerSize(8);
  auto* over = new QScatterSeries();
  over->setName("does not fit");
  over->setMarkerSize(8);
  over->setColor(QColor(170, 170, 170));
  auto* chosen = new QScatterSeries();
  chosen->setName("selected");
  chosen->setMarkerSize(14);
  chosen->setColor(QColor(220, 40, 40));
  auto* front = new QLineSeries();
  front->setName("Pareto front");
  double maxX = 1e-9, maxY = 1e-9, maxFitY = 0, minY = 1e300, maxFitX = 0, gpuGiB = 0;
  std::vector<QPointF> frontPoints;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const auto& c = candidates[i];
    const QPointF p(c.evaluation.peakMemoryBytes / kGiB, c.evaluation.stepSeconds);
    m_points.push_back(p);
    (c.fits ? fits : over)->append(p);
    if (static_cast<int>(i) == selected) chosen->append(p);
    maxX = std::max(maxX, p.x());
    maxY = std::max(maxY, p.y());
    if (c.fits) maxFitY = std::max(maxFitY, p.y());
    if (c.fits) maxFitX = std::max(maxFitX, p.x());
    gpuGiB = std::max(gpuGiB, c.evaluation.gpuMemoryBytes / kGiB);
    minY = std::min(minY, p.y());
  }
  // Plans far slower than every fitting one, or holding far more than the GPU, would squash the front:
  // the axes end a little past the fitting plans and the GPU's memory, and the title counts what is off them.
  if (maxFitY > 0) maxY = std::min(maxY, 1.6 * maxFitY);
  if (maxFitX > 0) maxX = std::min(maxX, 1.25 * std::max(maxFitX, gpuGiB));
  int off = 0;
  for (const auto& p : m_points) off += p.x() > maxX * 1.08 || p.y() > maxY * 1.08 ? 1 : 0;

  // The front: fitting plans that no other fitting plan beats on both axes.
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (!candidates[i].fits) continue;
    bool dominated = false;
    for (std::size_t j = 0; j < candidates.size() && !dominated; ++j) {
      dominated = j != i && candidates[j].fits && m_points[j].x() <= m_points[i].x() && m_points[j].y() <= m_points[i].y() &&
                  (m_points[j].x() < m_points[i].x() || m_points[j].y() < m_points[i].y());
    }
    if (!dominated) frontPoints.push_back(m_points[i]);
  }
  std::sort(frontPoints.begin(), frontPoints.end(), [](const QPointF& a, const QPointF& b) { return a.x() < b.x(); });
  for (const auto& p : frontPoints) front->append(p);
  for (QAbstractSeries* s : std::initializer_list<QAbstractSeries*>{front, fits, over, chosen}) chart->addSeries(s);
  auto* x = axis(off > 0 ? QString("peak GiB per GPU (%1 off the axes)").arg(off) : QString("peak memory per GPU (GiB)"), 0, maxX * 1.08);
  auto* y = axis("step time (s)", candidates.empty() ? 0.0 : 0.9 * minY, maxY * 1.08);
  chart->addAxis(x, Qt::AlignBottom);
  chart->addAxis(y, Qt::AlignLeft);
  for (auto* s : chart->series()) {
    s->attachAxis(x);
    s->attachAxis(y);
  }
  for (auto* s : {fits, over, chosen}) {
    connect(s, &QScatterSeries::clicked, this, [this](const QPointF& p) {
      const int i = nearest(p);
      if (i >= 0) emit candidateClicked(i);
    });
  }
  QChart* old = this->chart();
  setChart(chart);
  delete old;
}

MemoryChart::MemoryChart(QWidget* parent) : QChartView(newChart("Memory per GPU by pipeline stage"), parent) {
  setRenderHint(QPainter::Antialiasing);
}

void MemoryChart::setEvaluation(const costmodel::Evaluation& e, double budgetFraction) {
  const bool budgeted = budgetFraction > 0 && budgetFraction < 1;
  // What offload keeps in host memory (or NVMe) per GPU is not drawn; the title says how much and what.
  double host = 0, hostActivations = 0;
  for (const auto& st : e.stages) {
    host = std::max(host, st.memory.host);
    hostActivations = std::max(hostActivations, st.memory.hostActivations);
  }
  const std::string offHost = host <= 0 ? ""
                              : hostActivations <= 0 ? "; off the GPU: " + formatBytes(host) + " of offloaded states"
                              : hostActivations < host
                                  ? "; off the GPU: " + formatBytes(host) + " of offloaded states and activations"
                                  : "; off the GPU: " + formatBytes(host) + " of offloaded activations";
  QChart* chart = newChart(QString::fromStdString("Memory per GPU by pipeline stage (capacity " + formatBytes(e.gpuMemoryBytes) +
                                                  (budgeted ? ", budget " + formatBytes(budgetFraction * e.gpuMemoryBytes) : "") +
                                                  ", peak " + formatBytes(e.peakMemoryBytes) + offHost + ")"));
  auto* series = new QStackedBarSeries();
  const char* names[] = {"weights", "gradients", "optimizer", "activations", "buffers", "allocator + context"};
  std::vector<QBarSet*> sets;
  for (const char* n : names) {
    sets.push_back(new QBarSet(n));
    series->append(sets.back());
  }
  QStringList categories;
  double top = e.gpuMemoryBytes / kGiB;
  for (const auto& s : e.stages) {
    const auto& m = s.memory;
    const double values[] = {m.weights, m.gradients, m.optimizer, m.activations, m.buffers, m.allocator + m.context};
    for (std::size_t k = 0; k < sets.size(); ++k) *sets[k] << values[k] / kGiB;
    categories << QString("stage %1").arg(s.stage);
    top = std::max(top, m.total() / kGiB);
  }
  chart->addSeries(series);
  auto* x = new QBarCategoryAxis();
  x->append(categories);
  auto* y = axis("GiB", 0, top * 1.1);
  chart->addAxis(x, Qt::AlignBottom);
  chart->addAxis(y, Qt::AlignLeft);
  series->attachAxis(x);
  series->attachAxis(y);
  // The GPU's capacity as a line across all stages.
  auto* capacity = new QLineSeries();
  capacity->setName("GPU capacity");
  capacity->setPen(QPen(QColor(200, 30, 30), 2, Qt::DashLine));
  capacity->append(-0.5, e.gpuMemoryBytes / kGiB);
  capacity->append(static_cast<double>(e.stages.size()) - 0.5, e.gpuMemoryBytes / kGiB);
  chart->addSeries(capacity);
  auto* hidden = axis("", -0.5, static_cast<double>(e.stages.size()) - 0.5);
  hidden->setVisible(false);
  chart->addAxis(hidden, Qt::AlignTop);
  capacity->attachAxis(hidden);
  capacity->attachAxis(y);
  if (budgeted) {
    auto* budget = new QLineSeries();
    budget->setName(QString("budget (%1 of the GPU)").arg(budgetFraction, 0, 'f', 2));
    budget->setPen(QPen(QColor(230, 126, 34), 2, Qt::DotLine));
    budget->append(-0.5, budgetFraction * e.gpuMemoryBytes / kGiB);
    budget->append(static_cast<double>(e.stages.size()) - 0.5, budgetFraction * e.gpuMemoryBytes / kGiB);
    chart->addSeries(budget);
    budget->attachAxis(hidden);
    budget->attachAxis(y);
  }
  QChart* old = this->chart();
  setChart(chart);
  delete old;
}

LossChart::LossChart(QWidget* parent) : QChartView(newChart("Training loss"), parent) {
  setRenderHint(QPainter::Antialiasing);
  clear();
}

void LossChart::clear() {
  QChart* chart = newChart("Training loss");
  m_series = new QLineSeries();
  m_series->setName("loss");
  chart->addSeries(m_series);
  chart->addAxis(axis("step", 0, 1), Qt::AlignBottom);
  chart->addAxis(axis("loss", 0, 1), Qt::AlignLeft);
  m_series->attachAxis(chart->axes(Qt::Horizontal).first());
  m_series->attachAxis(chart->axes(Qt::Vertical).first());
  chart->legend()->hide();  // one series: the title names it, and its space goes to the plot
  m_max = 0;
  m_min = 1e300;
  m_steps = 0;
  QChart* old = this->chart();
  setChart(chart);
  delete old;
}

void LossChart::addLoss(int step, double loss) {
  m_series->append(step, loss);
  m_max = std::max(m_max, loss);
  m_min = std::min(m_min, loss);
  m_steps = std::max(m_steps, step);
  chart()->axes(Qt::Horizontal).first()->setRange(0, std::max(1, m_steps));
  chart()->axes(Qt::Vertical).first()->setRange(std::max(0.0, m_min * 0.9), m_max * 1.05);
}

int LossChart::points() const { return static_cast<int>(m_series->count()); }

TimelineView::TimelineView(QWidget* parent) : QWidget(parent) { setMinimumHeight(160); }

void TimelineView::setTimeline(const costmodel::Timeline& timeline, std::int64_t virtualStages, double stepSeconds) {
  m_timeline = timeline;
  m_virtualStages = std::max<std::int64_t>(1, virtualStages);
  m_stepSeconds = stepSeconds;
  update();
}

void TimelineView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().base());
  if (m_timeline.events.empty()) {
    p.drawText(rect(), Qt::AlignCenter, "Select a plan to see its pipeline timeline");
    return;
  }
  std::int64_t stages = 0;
  for (const auto& e : m_timeline.events) stages = std::max(stages, e.stage + 1);
  const int left = 70, top = 46, bottom = 24, right = 10;
  const double span = std::max(1e-12, m_timeline.makespanSeconds);
  const double rowHeight = std::max(6.0, (height() - top - bottom) / static_cast<double>(stages));
  const double scale = (width() - left - right) / span;
  // Legend and bubble.
  struct Key { const char* name; QColor color; };
  const Key keys[] = {{"forward", QColor(66, 133, 244)}, {"backward", QColor(52, 168, 83)},
                      {"input grad", QColor(52, 168, 83)}, {"weight grad", QColor(251, 140, 0)}};
  const QColor recomputeColor(142, 68, 173), commColor(200, 60, 60);
  int x = left;
  for (const int k : {0, 1, 3}) {
    p.fillRect(x, 8, 12, 12, keys[k].color);
    p.drawText(x + 16, 19, keys[k].name);
    x += 100;
  }
  p.fillRect(x, 8, 12, 12, recomputeColor);
  p.drawText(x + 16, 19, "recompute");
  x += 100;
  p.fillRect(x, 8, 12, 12, commColor);
  p.drawText(x + 16, 19, "exposed comm");
  // The summary on a line of its own, elided to the width rather than cut off.
  QString summary = QString("first forward to last backward %1 ms, idle (bubble) %2% of the busiest stage's span")
                        .arg(span * 1e3, 0, 'f', 1)
                        .arg(100 * m_timeline.bubbleFraction, 0, 'f', 1);
  if (m_stepSeconds > span * (1 + 1e-9)) {
    summary += QString("; the step, %1 ms, adds %2 ms after it (gradient reduction, optimizer)")
                   .arg(m_stepSeconds * 1e3, 0, 'f', 1)
                   .arg((m_stepSeconds - span) * 1e3, 0, 'f', 1);
  }
  p.drawText(left, 38, p.fontMetrics().elidedText(summary, Qt::ElideRight, width() - left - right));
  for (std::int64_t s = 0; s < stages; ++s) {
    const double y = top + s * rowHeight;
    p.fillRect(QRectF(left, y + 1, width() - left - right, rowHeight - 2), QColor(235, 235, 235));
    p.drawText(QRectF(0, y, left - 6, rowHeight), Qt::AlignRight | Qt::AlignVCenter, QString("stage %1").arg(s));
  }
  for (const auto& e : m_timeline.events) {
    const std::size_t k = static_cast<std::size_t>(e.kind);
    QColor c = keys[k].color;
    // Later virtual chunks of a stage are drawn lighter.
    const std::int64_t stagesPerChunk = std::max<std::int64_t>(1, stages);
    const std::int64_t virtualIndex = e.chunk / stagesPerChunk;
    if (m_virtualStages > 1) c = c.lighter(100 + static_cast<int>(60 * virtualIndex / std::max<std::int64_t>(1, m_virtualStages - 1)));
    const QRectF r(left + e.startSeconds * scale, top + e.stage * rowHeight + 2, std::max(1.0, (e.endSeconds - e.startSeconds) * scale),
                   rowHeight - 4);
    p.fillRect(r, c);
    // Inside the event: the recompute that opens a backward, and the exposed communication that ends it.
    if (e.recomputeSeconds > 0) p.fillRect(QRectF(r.left(), r.top(), e.recomputeSeconds * scale, r.height()), recomputeColor);
    if (e.commSeconds > 0) {
      const double w = e.commSeconds * scale;
      p.fillRect(QRectF(r.right() - w, r.top() + r.height() * 0.6, w, r.height() * 0.4), commColor);
    }
    if (r.width() > 4) {
      p.setPen(c.darker(150));
      p.drawRect(r.adjusted(0, 0, -1, -1));
      p.setPen(palette().text().color());
    }
    if (r.width() > 14 && r.height() > 10) {
      p.setPen(Qt::white);
      p.drawText(r, Qt::AlignCenter, QString::number(e.microBatch));
      p.setPen(palette().text().color());
    }
  }
  p.drawText(QRectF(left, height() - bottom, width() - left - right, bottom), Qt::AlignLeft | Qt::AlignVCenter, "0");
  p.drawText(QRectF(left, height() - bottom, width() - left - right, bottom), Qt::AlignRight | Qt::AlignVCenter,
             QString("%1 ms").arg(span * 1e3, 0, 'f', 1));
}


MeshView::MeshView(QWidget* parent) : QWidget(parent) {
  setMinimumHeight(160);
  setMouseTracking(true);
}

void MeshView::setPlan(const Plan& plan) {
  m_plan = plan;
  m_valid = true;
  update();
}

QRect MeshView::cell(std::int64_t gpu) const {
  const std::int64_t gpn = std::max<std::int64_t>(1, m_plan.cluster.gpusPerNode);
  const std::int64_t nodes = std::max<std::int64_t>(1, m_plan.cluster.nodes);
  const int top = 26, gap = 6;
  // The largest square cell for which every node (a row of gpn cells) fits the widget.
  int size = 48;
  std::int64_t nodeColumns = 1;
  for (; size > 3; --size) {
    const int nodeWidth = static_cast<int>(gpn) * size + gap;
    nodeColumns = std::max<std::int64_t>(1, (width() - 4) / nodeWidth);
    const std::int64_t rows = (nodes + nodeColumns - 1) / nodeColumns;
    if (rows * (size + gap) <= height() - top) break;
  }
  const std::int64_t node = gpu / gpn, local = gpu % gpn;
  const int nodeWidth = static_cast<int>(gpn) * size + gap;
  return {static_cast<int>(2 + (node % nodeColumns) * nodeWidth + local * size),
          static_cast<int>(top + (node / nodeColumns) * (size + gap)), size - 1, size - 1};
}

QString MeshView::describe(const QPoint& at) const {
  if (!m_valid) return {};
  for (std::int64_t g = 0; g < m_plan.cluster.totalGpus(); ++g) {
    if (cell(g).contains(at)) {
      const auto c = coordinatesOf(g, m_plan.parallel);
      return QString("rank %1: node %2, GPU %3 — tp %4, cp %5, dp %6, pp %7")
          .arg(g)
          .arg(g / m_plan.cluster.gpusPerNode)
          .arg(g % m_plan.cluster.gpusPerNode)
          .arg(c.tp)
          .arg(c.cp)
          .arg(c.dp)
          .arg(c.pp);
    }
  }
  return {};
}

bool MeshView::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip) {
    auto* help = static_cast<QHelpEvent*>(e);
    const QString text = describe(help->pos());
    if (text.isEmpty()) QToolTip::hideText();
    else QToolTip::showText(help->globalPos(), text, this);
    return true;
  }
  return QWidget::event(e);
}

void MeshView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().base());
  if (!m_valid) {
    p.drawText(rect(), Qt::AlignCenter, "Select a plan to see which GPU holds which coordinate");
    return;
  }
  const auto& par = m_plan.parallel;
  // At the smallest cell a large cluster may still not fit: the nodes drawn are counted, and the
  // labels are named only when the cells are wide enough to carry them.
  const std::int64_t gpus = m_plan.cluster.totalGpus();
  const std::int64_t gpn = std::max<std::int64_t>(1, m_plan.cluster.gpusPerNode);
  std::int64_t shownNodes = 0;
  for (std::int64_t node = 0; node < m_plan.cluster.nodes; ++node) shownNodes += cell(node * gpn).bottom() < height() ? 1 : 0;
  const bool labels = gpus > 0 && cell(0).width() >= 30;
  const QString order = QString::fromStdString(rankOrderText(par));
  QString header = QString("%1 nodes x %2 GPUs; rank order %3 (innermost first); colour: node; bottom stripe: pipeline stage; %4hover for details")
                       .arg(m_plan.cluster.nodes)
                       .arg(m_plan.cluster.gpusPerNode)
                       .arg(order)
                       .arg(labels ? "label: tp.cp.dp.pp; " : "");
  if (shownNodes < m_plan.cluster.nodes) header = QString("showing %1 of %2 nodes (enlarge the window for more); ").arg(shownNodes).arg(m_plan.cluster.nodes) + header;
  p.drawText(QRect(2, 2, width() - 4, 20), Qt::AlignLeft | Qt::AlignVCenter, p.fontMetrics().elidedText(header, Qt::ElideRight, width() - 4));
  QFont small = font();
  small.setPointSizeF(std::max(5.0, small.pointSizeF() * 0.7));
  p.setFont(small);
  for (std::int64_t g = 0; g < gpus; ++g) {
    const QRect r = cell(g);
    if (r.bottom() >= height()) break;  // the nodes past the bottom are counted in the header
    const std::int64_t node = g / gpn;
    QColor c = QColor::fromHsv(static_cast<int>((node * 47) % 360), 90, 235);
    p.fillRect(r, c);
    const auto k = coordinatesOf(g, par);
    // A stripe along the bottom in the colour of the GPU's pipeline stage.
    if (par.pp > 1 && r.height() >= 6) {
      p.fillRect(QRect(r.left(), r.bottom() - r.height() / 4, r.width(), r.height() / 4 + 1),
                 QColor::fromHsv(static_cast<int>(k.pp * 360 / par.pp), 200, 160));
    }
    p.setPen(QColor(90, 90, 90));
    p.drawRect(r);
    if (labels) p.drawText(r, Qt::AlignCenter, QString("%1.%2.%3.%4").arg(k.tp).arg(k.cp).arg(k.dp).arg(k.pp));
  }
}

}  // namespace colo::ui
