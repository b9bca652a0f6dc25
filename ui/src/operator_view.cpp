#include "colo/ui/operator_view.h"

#include <QBrush>
#include <QColor>
#include <QFont>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QTreeWidget>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "colo/core/units.h"

namespace colo::ui {
namespace {

QString q(const std::string& s) { return QString::fromStdString(s); }

// What an axis role splits, as a colour: tensor-parallel roles blue and orange, data-parallel green,
// sequence purple, experts yellow and pink.
QColor roleColour(const std::string& roles) {
  if (roles.find("out") != std::string::npos) return QColor("#cfe2ff");
  if (roles.find("in") != std::string::npos && roles.find("inner") == std::string::npos) return QColor("#ffe5cc");
  if (roles.find("inner") != std::string::npos) return QColor("#f8d7da");
  if (roles.find("expert") != std::string::npos) return QColor("#fff3cd");
  if (roles.find("seq") != std::string::npos) return QColor("#e2d9f3");
  if (roles.find("batch") != std::string::npos) return QColor("#d4edda");
  return QColor("#f1f3f5");
}

// ", offloaded to host memory: activations 25%, weights 100%" (the shares that are not zero), or nothing.
QString offloadText(const planner::OperatorPlan& p) {
  QStringList parts;
  auto add = [&parts](const char* what, double share) {
    if (share > 0) parts << QString(what) + " " + QString::number(share * 100, 'f', 0) + "%";
  };
  add("activations", p.activationOffloadFraction);
  add("optimizer states", p.optimizerOffloadFraction);
  add("weights", p.weightOffloadFraction);
  return parts.isEmpty() ? QString() : ", offloaded to host memory: " + parts.join(", ");
}

QString seconds(double s) {
  return s >= 1e-3 ? QString::number(s * 1e3, 'f', 2) + " ms" : QString::number(s * 1e6, 'f', 1) + " us";
}

}  // namespace

OperatorView::OperatorView(QWidget* parent) : QWidget(parent) {
  m_summary = new QLabel("Select a plan.");
  m_summary->setWordWrap(true);
  m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_solve = new QPushButton("Solve per operator");
  m_solve->setToolTip("Give every operator its own sharding, recompute and offload choice under the memory budget "
                      "(colo-plan autoparallel) and show the result here");
  m_solve->setEnabled(false);
  m_tree = new QTreeWidget();
  m_tree->setColumnCount(9);
  m_tree->setHeaderLabels({"operator", "axes", "input", "output", "collectives", "time", "saved", "states", "activations"});
  m_tree->header()->setSectionResizeMode(QHeaderView::ResizeToContents);
  m_tree->setAlternatingRowColors(false);
  auto* top = new QHBoxLayout();
  top->addWidget(m_summary, 1);
  top->addWidget(m_solve);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(top);
  layout->addWidget(m_tree, 1);
  connect(m_solve, &QPushButton::clicked, this, &OperatorView::solveJoint);
  connect(&m_watcher, &QFutureWatcher<Result<planner::AutoParallelResult>>::finished, this, &OperatorView::onJointFinished);
}

QString OperatorView::summary() const { return m_summary->text(); }

void OperatorView::setPlan(const Plan& plan, double maxMemoryFraction) {
  m_plan = plan;
  m_fraction = maxMemoryFraction;
  m_solve->setEnabled(!m_watcher.isRunning());
  auto view = planner::operatorView(plan, maxMemoryFraction);
  if (!view) {
    m_tree->clear();
    m_summary->setText(q(view.error().message) + ". \"Solve per operator\" still finds the joint per-operator plan.");
    return;
  }
  show(*view, plan.operatorPlan.is_object() ? "Saved per-operator plan" : "Selected plan, operator by operator");
}

void OperatorView::solveJoint() {
  if (!m_plan || m_watcher.isRunning()) return;
  planner::AutoParallelOptions options;
  options.globalBatchSize = m_plan->globalBatchSize;
  options.seqLen = m_plan->seqLen;
  options.precision = m_plan->precision;
  options.maxMemoryFraction = m_fraction;
  options.hostMicrosecondsPerOp = m_plan->execution.hostMicrosecondsPerOp;
  options.flashAttention = m_plan->execution.flashAttention;
  options.flashAttention2 = m_plan->execution.flashAttention2;
  const Model model = m_plan->model;
  const ClusterSpec cluster = m_plan->cluster;
  m_solve->setEnabled(false);
  m_summary->setText("Solving every operator's sharding, recompute and offload ...");
  m_watcher.setFuture(QtConcurrent::run([model, cluster, options] { return planner::autoParallel(model, cluster, options); }));
}

void OperatorView::onJointFinished() {
  m_solve->setEnabled(m_plan.has_value());
  const auto result = m_watcher.result();
  if (!result) {
    m_summary->setText("Per-operator solve: " + q(result.error().message));
    emit jointSolved(false);
    return;
  }
  QString title = "Joint per-operator solve (" + QString::number(result->solveSeconds, 'f', 2) + " s)";
  if (result->megatronFits) {
    title += ", " + QString::number(result->megatron.stepSeconds / result->joint.stepSeconds, 'f', 3) +
             "x the speed of Megatron's column/row split on the best mesh the solver found for it (" +
             QString::number(result->megatron.stepSeconds, 'f', 3) +
             " s; the \"vs Megatron baseline\" tab compares Megatron-LM's usual degrees instead)";
  } else {
    title += "; Megatron's column/row split does not fit this budget on any mesh the solver tried";
  }
  show(result->joint, title);
  emit jointSolved(true);
}

void OperatorView::show(const planner::OperatorPlan& p, const QString& title) {
  m_summary->setText(title + ": " + q(p.layoutText()) + ", " +
                     QString::number(p.microBatchSize) + " samples x " + QString::number(p.microBatches) +
                     " micro-batches, step " + QString::number(p.stepSeconds, 'f', 3) + " s, peak " + q(formatBytes(p.peakMemoryBytes)) +
                     (p.fits ? "" : " (does not fit)") + offloadText(p) + ". " + q(p.expressedAs) + "." +
                     (m_plan && (m_plan->execution.unfused.any() || m_plan->execution.torchCrossEntropy)
                          ? " Costed with fused elementwise kernels and Megatron's loss: the plan's eager kernels are not applied here."
                          : QString()));
  m_tree->clear();
  for (const auto& b : p.blocks) {
    auto* block = new QTreeWidgetItem(m_tree, {q(b.name) + (b.count > 1 ? " (x" + QString::number(b.count) + ")" : "")});
    QFont bold = block->font(0);
    bold.setBold(true);
    block->setFont(0, bold);
    for (const auto& u : b.units) {
      auto* item = new QTreeWidgetItem(block, {q(u.unit), q(u.roles), q(u.input), q(u.output), q(u.collectives), seconds(u.seconds),
                                               q(formatBytes(u.activationBytes)), q(formatBytes(u.stateBytes)), q(u.activation)});
      item->setBackground(1, QBrush(roleColour(u.roles)));
      item->setToolTip(0, q("ops: " + [&] {
                         std::string all;
                         for (const auto& o : u.ops) all += (all.empty() ? "" : ", ") + o;
                         return all;
                       }()));
      for (int c = 5; c <= 7; ++c) item->setTextAlignment(c, Qt::AlignRight | Qt::AlignVCenter);
      if (u.recompute) {
        QFont italic = item->font(8);
        italic.setItalic(true);
        item->setFont(8, italic);
        item->setForeground(8, QBrush(QColor("#6c757d")));
      } else if (u.activation.find("offloaded") != std::string::npos) {
        item->setForeground(8, QBrush(QColor("#0c7c8c")));
      }
    }
    block->setExpanded(b.name.rfind("layer", 0) == 0);
  }
}

}  // namespace colo::ui
