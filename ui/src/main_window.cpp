#include "colo/ui/main_window.h"

#include <QApplication>
#include <QCheckBox>
#include <QCloseEvent>
#include <QComboBox>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QPainter>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QSplitter>
#include <QStatusBar>
#include <QSvgGenerator>
#include <QTabWidget>
#include <QTableView>
#include <QTextBrowser>
#include <QVBoxLayout>

#include "colo/core/library.h"
#include "colo/core/plan.h"
#include "colo/core/units.h"
#include "colo/costmodel/timeline.h"
#include "colo/planner/baseline.h"
#include "colo/planner/budget.h"
#include "colo/ui/candidates_model.h"
#include "colo/ui/charts.h"
#include "colo/ui/operator_view.h"
#include "colo/ui/run_panel.h"
#include "colo/ui/search_runner.h"

namespace colo::ui {
namespace {

QString q(const std::string& s) { return QString::fromStdString(s); }

// A library name or a file path.
Result<std::string> resolve(LibraryKind kind, const QString& nameOrFile) {
  return resolveLibraryFile(kind, nameOrFile.toStdString());
}

}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle("colo-studio");
  setAcceptDrops(true);
  m_runner = new SearchRunner(this);
  m_model = new CandidatesModel(this);
  m_filter = new CandidatesFilter(this);
  m_filter->setSourceModel(m_model);
  m_debounce.setSingleShot(true);
  m_debounce.setInterval(400);
  connect(&m_debounce, &QTimer::timeout, this, &MainWindow::startSearch);
  buildUi();
  buildMenus();
  QSettings settings("colo", "colo-studio");
  restoreGeometry(settings.value("geometry").toByteArray());
  restoreState(settings.value("state").toByteArray());
  m_ready = true;
}

MainWindow::~MainWindow() = default;

// The model and cluster rows: a library choice or a file, and the cluster editor.
void MainWindow::addSourceRows(QFormLayout* form) {
  m_modelBox = new QComboBox();
  m_modelBox->setEditable(false);
  m_modelBox->addItem("(choose a model)");
  for (const auto& e : libraryEntries(LibraryKind::kModels)) m_modelBox->addItem(q(e));
  auto* openModelButton = new QPushButton("Open…");
  auto* modelRow = new QHBoxLayout();
  modelRow->addWidget(m_modelBox, 1);
  modelRow->addWidget(openModelButton);
  form->addRow("Model", modelRow);
  m_clusterBox = new QComboBox();
  m_clusterBox->addItem("(choose a cluster)");
  for (const auto& e : libraryEntries(LibraryKind::kClusters)) m_clusterBox->addItem(q(e));
  auto* openClusterButton = new QPushButton("Open…");
  auto* editClusterButton = new QPushButton("Edit…");
  auto* clusterRow = new QHBoxLayout();
  clusterRow->addWidget(m_clusterBox, 1);
  clusterRow->addWidget(openClusterButton);
  clusterRow->addWidget(editClusterButton);
  form->addRow("Cluster", clusterRow);
  connect(openModelButton, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, "Open a model", {}, "Model files (*.json)");
    if (!f.isEmpty()) openModel(f);
  });
  connect(openClusterButton, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, "Open a cluster", {}, "Cluster files (*.json)");
    if (!f.isEmpty()) openCluster(f);
  });
  connect(editClusterButton, &QPushButton::clicked, this, &MainWindow::editCluster);
}

// The constraints and budget rows: batch, sequence, tensor parallel, precision, memory, tokens, price,
// deadline, and whether a change re-runs the search.
void MainWindow::addConstraintRows(QFormLayout* form) {
  m_gbs = new QSpinBox();
  m_gbs->setRange(1, 1 << 24);
  m_gbs->setValue(1536);
  form->addRow("Global batch (samples)", m_gbs);
  m_seq = new QSpinBox();
  m_seq->setRange(0, 1 << 20);
  m_seq->setSpecialValueText("model default");
  form->addRow("Sequence length", m_seq);
  m_fixTp = new QComboBox();
  m_fixTp->addItems({"any", "1", "2", "4", "8", "16"});
  form->addRow("Tensor parallel", m_fixTp);
  m_precision = new QComboBox();
  // "auto": bf16 where the GPU has it, fp16 on GPUs without (V100), as colo-plan does.
  m_precision->addItems({"auto", "bf16", "fp16", "fp8", "fp4", "fp32"});
  form->addRow("Precision", m_precision);
  m_attention = new QComboBox();
  m_attention->setObjectName("attention");
  // The fused attention kernels every candidate runs, as colo-plan search --attention names them.
  m_attention->addItem("flash (the GPU's fastest)", "flash");
  m_attention->addItem("flash2 (FlashAttention-2)", "flash2");
  m_attention->addItem("unfused", "unfused");
  m_attention->setToolTip(
      "flash: cuDNN's fused attention or FlashAttention-3 on Hopper and Blackwell, FlashAttention-2 before.\n"
      "flash2: FlashAttention-2's kernels on any GPU (PyTorch's SDPA flash backend; slower on Hopper).\n"
      "unfused: the attention scores are materialised (more time and memory).");
  form->addRow("Attention kernels", m_attention);
  m_frameworkKernels = new QComboBox();
  m_frameworkKernels->setObjectName("frameworkKernels");
  // How the framework runs the norms, rotary embedding, SwiGLU and loss (execution.unfused_kernels and
  // torch_cross_entropy; docs/costmodel.md, "Eager elementwise kernels").
  m_frameworkKernels->addItem("fused (Megatron-LM, Transformer Engine)", "fused");
  m_frameworkKernels->addItem("fused, with Megatron-Core's loss fusion (Megatron-Bridge)", "bridge");
  m_frameworkKernels->addItem("torchtitan, compiled", "compiled");
  m_frameworkKernels->addItem("eager PyTorch (torchtitan without compile, Hugging Face)", "eager");
  m_frameworkKernels->setToolTip(
      "fused: one kernel per norm, rotary embedding and SwiGLU, and Megatron's vocab-parallel loss.\n"
      "Megatron-Bridge: the same, with the loss's fp32 passes compiled (--cross-entropy-loss-fusion).\n"
      "compiled: torch.compile fuses each transformer block and the loss (compile.enable with its default\n"
      "components, torchtitan from 2025-08); the norm after the last block stays eager.\n"
      "eager: PyTorch's decompositions of every norm, rotary and SwiGLU (more time and memory), and\n"
      "F.cross_entropy on fp32 logits.");
  form->addRow("Framework kernels", m_frameworkKernels);
  m_memoryFraction = new QDoubleSpinBox();
  m_memoryFraction->setRange(0.3, 1.0);
  m_memoryFraction->setSingleStep(0.05);
  m_memoryFraction->setValue(0.95);
  form->addRow("Max memory fraction", m_memoryFraction);
  m_trainTokens = new QLineEdit();
  m_trainTokens->setPlaceholderText("e.g. 1.5T: adds days, GPU-hours, cost");
  form->addRow("Train tokens", m_trainTokens);
  m_price = new QDoubleSpinBox();
  m_price->setRange(0, 1000);
  m_price->setDecimals(2);
  m_price->setPrefix("$");
  m_price->setSpecialValueText("no price");
  form->addRow("Price per GPU-hour", m_price);
  m_deadline = new QDoubleSpinBox();
  m_deadline->setRange(0, 100000);
  m_deadline->setDecimals(2);
  m_deadline->setSuffix(" days");
  m_deadline->setSpecialValueText("no deadline");
  m_deadline->setToolTip("Plans whose training run would take longer are marked LATE in the days column");
  form->addRow("Deadline", m_deadline);
  m_live = new QCheckBox("re-run the search when a constraint changes");
  m_live->setChecked(true);
  form->addRow(m_live);
}

// Left: what to plan and the constraints, the search buttons, progress and errors.
QWidget* MainWindow::buildSetupPanel() {
  auto* setup = new QWidget();
  auto* form = new QFormLayout();
  addSourceRows(form);
  addConstraintRows(form);
  m_search = new QPushButton("Search plans");
  m_cancel = new QPushButton("Cancel");
  m_cancel->setEnabled(false);
  auto* buttons = new QHBoxLayout();
  buttons->addWidget(m_search);
  buttons->addWidget(m_cancel);
  m_progress = new QProgressBar();
  m_progress->setRange(0, 1000);
  m_progress->setValue(0);
  m_error = new QLabel();
  m_error->setObjectName("inlineError");
  m_error->setWordWrap(true);
  m_error->setStyleSheet("QLabel { color: #b00020; font-weight: bold; }");
  m_error->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_error->hide();
  m_summary = new QLabel("Open a model and a cluster (or drop their JSON files here), then search.");
  m_summary->setWordWrap(true);
  auto* setupLayout = new QVBoxLayout(setup);
  setupLayout->addLayout(form);
  setupLayout->addLayout(buttons);
  setupLayout->addWidget(m_progress);
  setupLayout->addWidget(m_error);
  setupLayout->addWidget(m_summary);
  setupLayout->addStretch(1);
  return setup;
}

// Center: the candidates' table with its filter, and their Pareto front.
QWidget* MainWindow::buildCandidatesPanel() {
  auto* table = new QWidget();
  m_filterText = new QLineEdit();
  m_filterText->setPlaceholderText("filter (e.g. interleaved, selective, 1f1b)");
  m_fitsOnly = new QCheckBox("fits only");
  auto* filterRow = new QHBoxLayout();
  filterRow->addWidget(m_filterText, 1);
  filterRow->addWidget(m_fitsOnly);
  m_table = new QTableView();
  m_table->setModel(m_filter);
  m_table->setSortingEnabled(true);
  m_table->sortByColumn(CandidatesModel::kRank, Qt::AscendingOrder);
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->setSelectionMode(QAbstractItemView::SingleSelection);
  m_table->verticalHeader()->hide();
  m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  showBudgetColumns(false);
  auto* tableLayout = new QVBoxLayout(table);
  tableLayout->addLayout(filterRow);
  tableLayout->addWidget(m_table);
  m_pareto = new ParetoChart();
  auto* candidates = new QSplitter(Qt::Horizontal);
  candidates->addWidget(table);
  candidates->addWidget(m_pareto);
  candidates->setStretchFactor(0, 3);
  candidates->setStretchFactor(1, 2);
  return candidates;
}

// Below the candidates: the details of the selected plan.
QTabWidget* MainWindow::buildDetailTabs() {
  m_timeline = new TimelineView();
  m_memory = new MemoryChart();
  m_mesh = new MeshView();
  m_baseline = new QTextBrowser();
  m_run = new RunPanel();
  m_details = new QTabWidget();
  m_details->addTab(m_timeline, "Pipeline timeline");
  m_details->addTab(m_memory, "Memory");
  m_details->addTab(m_mesh, "Device mesh");
  m_details->addTab(m_baseline, "vs Megatron baseline");
  m_details->addTab(m_run, "Profile && run");
  m_operators = new OperatorView();
  m_details->addTab(m_operators, "Operators");
  return m_details;
}

void MainWindow::buildUi() {
  auto* right = new QSplitter(Qt::Vertical);
  right->addWidget(buildCandidatesPanel());
  right->addWidget(buildDetailTabs());
  right->setStretchFactor(0, 1);
  right->setStretchFactor(1, 1);
  right->setSizes({420, 480});
  auto* main = new QSplitter(Qt::Horizontal);
  main->addWidget(buildSetupPanel());
  main->addWidget(right);
  main->setStretchFactor(1, 1);
  main->setSizes({320, 1180});
  setCentralWidget(main);
  statusBar()->showMessage("ready");
  connectSignals();
}

// What the constraints, the table, the chart and the search runner do when they change.
void MainWindow::connectSignals() {
  connect(m_modelBox, &QComboBox::activated, this, [this](int i) {
    if (i > 0) openModel(m_modelBox->itemData(i).isValid() ? m_modelBox->itemData(i).toString() : m_modelBox->itemText(i));
  });
  connect(m_clusterBox, &QComboBox::activated, this, [this](int i) {
    if (i > 0) openCluster(m_clusterBox->itemData(i).isValid() ? m_clusterBox->itemData(i).toString() : m_clusterBox->itemText(i));
  });
  connect(m_search, &QPushButton::clicked, this, &MainWindow::startSearch);
  connect(m_cancel, &QPushButton::clicked, m_runner, &SearchRunner::cancel);
  for (auto* spin : {m_gbs, m_seq}) connect(spin, &QSpinBox::valueChanged, this, &MainWindow::constraintsChanged);
  connect(m_memoryFraction, &QDoubleSpinBox::valueChanged, this, &MainWindow::constraintsChanged);
  connect(m_trainTokens, &QLineEdit::textChanged, this, &MainWindow::budgetChanged);
  connect(m_price, &QDoubleSpinBox::valueChanged, this, &MainWindow::budgetChanged);
  connect(m_deadline, &QDoubleSpinBox::valueChanged, this, &MainWindow::budgetChanged);
  for (auto* box : {m_fixTp, m_precision, m_attention, m_frameworkKernels}) connect(box, &QComboBox::currentIndexChanged, this, &MainWindow::constraintsChanged);
  connect(m_filterText, &QLineEdit::textChanged, m_filter, &QSortFilterProxyModel::setFilterFixedString);
  connect(m_fitsOnly, &QCheckBox::toggled, m_filter, &CandidatesFilter::setFitsOnly);
  connect(m_table->selectionModel(), &QItemSelectionModel::currentRowChanged, this, [this](const QModelIndex& current) {
    if (current.isValid()) selectCandidate(m_filter->mapToSource(current).row());
  });
  connect(m_pareto, &ParetoChart::candidateClicked, this, &MainWindow::selectCandidate);
  connect(m_runner, &SearchRunner::progress, this, [this](int permille, const QString& what) {
    m_progress->setValue(permille);
    statusBar()->showMessage(what);
  });
  connect(m_runner, &SearchRunner::finished, this, &MainWindow::onSearchFinished);
  connect(m_runner, &SearchRunner::cancelled, this, [this] {
    m_cancel->setEnabled(false);
    m_search->setEnabled(true);
    statusBar()->showMessage("search cancelled");
  });
  connect(m_runner, &SearchRunner::failed, this, [this](const QString& message) {
    m_cancel->setEnabled(false);
    m_search->setEnabled(true);
    showError(message);
  });
}

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu("&File");
  file->addAction("Open model…", this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, "Open a model", {}, "Model files (*.json)");
    if (!f.isEmpty()) openModel(f);
  });
  file->addAction("Open cluster…", this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, "Open a cluster", {}, "Cluster files (*.json)");
    if (!f.isEmpty()) openCluster(f);
  });
  m_recentMenu = file->addMenu("Recent files");
  refreshRecentMenu();
  file->addSeparator();
  file->addAction("Save selected plan…", this, [this] {
    const QString f = QFileDialog::getSaveFileName(this, "Save plan", "plan.json", "Plans (*.json)");
    if (!f.isEmpty() && !savePlan(f)) QMessageBox::warning(this, "Save plan", errorText());
  });
  file->addAction("Export chart (PNG or SVG)…", this, [this] {
    const QString f = QFileDialog::getSaveFileName(this, "Export chart", "chart.png", "Images (*.png *.svg)");
    if (!f.isEmpty()) exportChart(f);
  });
  file->addAction("Export comparison (Markdown)…", this, [this] {
    const QString f = QFileDialog::getSaveFileName(this, "Export comparison", "comparison.md", "Markdown (*.md)");
    if (f.isEmpty()) return;
    QFile out(f);
    if (out.open(QIODevice::WriteOnly | QIODevice::Text)) out.write(comparisonMarkdown().toUtf8());
  });
  file->addSeparator();
  file->addAction("Quit", this, &QWidget::close);
}

void MainWindow::showError(const QString& message) {
  m_error->setText(message);
  m_error->show();
  statusBar()->showMessage("error: see the setup panel");
}

void MainWindow::clearError() {
  m_error->clear();
  m_error->hide();
}

QString MainWindow::errorText() const { return m_error->isVisible() || !m_error->text().isEmpty() ? m_error->text() : QString(); }

bool MainWindow::openModel(const QString& nameOrFile) {
  auto file = resolve(LibraryKind::kModels, nameOrFile);
  if (!file) {
    showError(q(file.error().toString()));
    return false;
  }
  auto model = loadModel(*file);
  if (!model) {
    showError(q(model.error().toString()));
    return false;
  }
  clearError();
  m_loadedModel = std::move(*model);
  m_modelFile = q(*file);
  loaded(m_modelBox, q(m_loadedModel->name()), m_modelFile, nameOrFile);
  return true;
}

void MainWindow::loaded(QComboBox* box, const QString& name, const QString& file, const QString& given) {
  int index = box->findText(name);
  if (index < 0) {
    box->addItem(name, file);
    index = box->count() - 1;
  }
  box->setCurrentIndex(index);
  if (QFileInfo(given).exists()) rememberRecent(QFileInfo(given).absoluteFilePath());
  constraintsChanged();
}

bool MainWindow::openCluster(const QString& nameOrFile) {
  auto file = resolve(LibraryKind::kClusters, nameOrFile);
  if (!file) {
    showError(q(file.error().toString()));
    return false;
  }
  auto cluster = loadCluster(*file);
  if (!cluster) {
    showError(q(cluster.error().toString()));
    return false;
  }
  clearError();
  m_loadedCluster = std::move(*cluster);
  loaded(m_clusterBox, q(m_loadedCluster->name), q(*file), nameOrFile);
  return true;
}

void MainWindow::editCluster() {
  if (!m_loadedCluster) {
    showError("Open a cluster to start from (its GPU type and links), then edit its size and network.");
    return;
  }
  QDialog dialog(this);
  dialog.setWindowTitle("Edit cluster");
  auto* form = new QFormLayout(&dialog);
  auto* nodes = new QSpinBox();
  nodes->setRange(1, 100000);
  nodes->setValue(static_cast<int>(m_loadedCluster->nodes));
  auto* gpn = new QSpinBox();
  gpn->setRange(1, 64);
  gpn->setValue(static_cast<int>(m_loadedCluster->gpusPerNode));
  auto* network = new QDoubleSpinBox();
  network->setRange(0.1, 10000);
  network->setSuffix(" GB/s per GPU");
  network->setValue(m_loadedCluster->links.back().bytesPerSecond / 1e9);
  form->addRow("GPU", new QLabel(q(m_loadedCluster->gpu.name)));
  form->addRow("Nodes", nodes);
  form->addRow("GPUs per node", gpn);
  form->addRow(q("Network (" + m_loadedCluster->links.back().name + ")"), network);
  auto* box = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
  form->addRow(box);
  connect(box, &QDialogButtonBox::accepted, &dialog, &QDialog::accept);
  connect(box, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
  if (dialog.exec() != QDialog::Accepted) return;
  ClusterSpec c = *m_loadedCluster;
  c.nodes = nodes->value();
  c.gpusPerNode = gpn->value();
  c.links.back().bytesPerSecond = network->value() * 1e9;
  for (auto& level : c.links) {
    if (level.spanGpus > c.gpusPerNode && &level != &c.links.back()) level.spanGpus = c.gpusPerNode;
  }
  c.name = m_loadedCluster->name + " (edited: " + std::to_string(c.nodes) + "x" + std::to_string(c.gpusPerNode) + ")";
  m_loadedCluster = c;
  m_clusterBox->addItem(q(c.name));
  m_clusterBox->setCurrentIndex(m_clusterBox->count() - 1);
  constraintsChanged();
}

void MainWindow::setGlobalBatch(int samples) { m_gbs->setValue(samples); }

bool MainWindow::setAttentionKernels(const QString& name) {
  const int i = m_attention->findData(name);
  if (i < 0) return false;
  m_attention->setCurrentIndex(i);
  return true;
}

bool MainWindow::setFrameworkKernels(const QString& name) {
  const int i = m_frameworkKernels->findData(name);
  if (i < 0) return false;
  m_frameworkKernels->setCurrentIndex(i);
  return true;
}

void MainWindow::setTrainingBudget(const QString& tokens, double pricePerGpuHour, double deadlineDays) {
  m_trainTokens->setText(tokens);
  m_price->setValue(pricePerGpuHour);
  m_deadline->setValue(deadlineDays);
}

// The budget only changes the days, GPU-hours and cost columns: no new search. A token count that does
// not parse is shown in red with the reason.
void MainWindow::budgetChanged() {
  planner::TrainingBudget budget;
  const std::string text = m_trainTokens->text().trimmed().toStdString();
  if (!text.empty()) {
    auto tokens = planner::parseTokenCount(text);
    if (!tokens) {
      m_trainTokens->setStyleSheet("border: 1px solid #c0392b;");
      m_trainTokens->setToolTip(QString::fromStdString(tokens.error().message));
      m_model->setBudget({});
      showBudgetColumns(false);
      return;
    }
    budget.trainTokens = *tokens;
    budget.pricePerGpuHour = m_price->value();
    budget.deadlineDays = m_deadline->value();
  }
  m_trainTokens->setStyleSheet({});
  m_trainTokens->setToolTip({});
  m_model->setBudget(budget);
  showBudgetColumns(budget.enabled());
}

// Days, GPU-hours and cost only say something with a training budget: without one they are hidden, so
// the layout columns come into view.
void MainWindow::showBudgetColumns(bool shown) {
  for (const int column : {CandidatesModel::kDays, CandidatesModel::kGpuHours, CandidatesModel::kCost}) {
    m_table->setColumnHidden(column, !shown);
  }
}

planner::SearchOptions MainWindow::options() const {
  planner::SearchOptions o;
  o.globalBatchSize = m_gbs->value();
  o.seqLen = m_seq->value();
  o.maxMemoryFraction = m_memoryFraction->value();
  o.topK = 200;
  if (m_fixTp->currentIndex() > 0) o.fixed["tp"] = m_fixTp->currentText().toLongLong();
  const auto precision = parseDType(m_precision->currentText().toStdString());
  if (precision) {
    o.precision = *precision;
  } else if (m_loadedCluster) {
    o.precision = planner::defaultPrecision(m_loadedCluster->gpu);
  }
  Execution kernels;
  if (setAttention(kernels, m_attention->currentData().toString().toStdString())) {
    o.flashAttention = kernels.flashAttention;
    o.execution.flashAttention2 = kernels.flashAttention2;
  }
  const QString framework = m_frameworkKernels->currentData().toString();
  if (framework == "eager") o.execution.unfused = UnfusedKernels::all();
  if (framework == "compiled") o.execution.unfused.finalNorm = true;
  o.execution.torchCrossEntropy = framework == "eager";
  o.execution.nativeFusedCrossEntropy = framework == "bridge";
  return o;
}

void MainWindow::constraintsChanged() {
  if (m_ready && m_live->isChecked() && m_loadedModel && m_loadedCluster) m_debounce.start();
}

void MainWindow::startSearch() {
  m_debounce.stop();
  if (!m_loadedModel || !m_loadedCluster) {
    showError("Open a model and a cluster first.");
    return;
  }
  clearError();
  m_progress->setValue(0);
  m_search->setEnabled(false);
  m_cancel->setEnabled(true);
  m_summary->setText("searching…");
  m_runner->start(*m_loadedModel, *m_loadedCluster, options());
}

void MainWindow::onSearchFinished() {
  m_cancel->setEnabled(false);
  m_search->setEnabled(true);
  const auto& r = m_runner->result();
  m_model->setResult(r);
  m_selected = -1;
  m_pareto->setCandidates(m_model->candidates(), -1);
  const auto& s = r.stats;
  QString text = QString("%1 configurations, %2 pruned by rule, %3 costed, %4 fit (%5 s)")
                     .arg(s.generated)
                     .arg(s.generated - s.costed)
                     .arg(s.costed)
                     .arg(s.feasible)
                     .arg(s.seconds, 0, 'f', 2);
  if (!r.feasible()) {
    showError(q("No plan fits: " + r.infeasibleReason));
  } else {
    const auto& best = r.top.front();
    const costmodel::PredictionBands bands = costmodel::bandsOf(best.plan, best.evaluation);
    text += q("\nbest: " + formatFixed(best.evaluation.stepSeconds, 3) + " s per step" +
              (bands.time ? " (" + bands.time->describe() + ")" : "") + ", " + formatFixed(100 * best.evaluation.mfu, 1) +
              "% MFU — " + best.reason);
    if (m_model->budget().enabled()) {
      const auto cost = planner::trainingCost(best.plan, best.evaluation, m_model->budget());
      text += q("\n" + formatCount(m_model->budget().trainTokens) + " tokens: " + cost.describe(m_model->budget()));
    }
  }
  m_summary->setText(text);
  m_progress->setValue(1000);
  statusBar()->showMessage("search done");
  if (r.feasible()) selectCandidate(0);
}

void MainWindow::selectCandidate(int row) {
  if (row < 0 || row >= m_model->rowCount()) return;
  m_selected = row;
  const planner::Candidate& c = m_model->candidate(row);
  const QModelIndex proxy = m_filter->mapFromSource(m_model->index(row, 0));
  if (proxy.isValid() && m_table->currentIndex().row() != proxy.row()) {
    const QSignalBlocker block(m_table->selectionModel());
    m_table->selectRow(proxy.row());
  }
  m_pareto->setCandidates(m_model->candidates(), row);
  if (auto t = costmodel::simulateSchedule(costmodel::scheduleInputOf(c.plan, c.evaluation))) {
    m_timeline->setTimeline(*t, c.plan.parallel.virtualStages, c.evaluation.stepSeconds);
  }
  m_memory->setEvaluation(c.evaluation, m_memoryFraction->value());
  m_mesh->setPlan(c.plan);
  m_run->setPlan(c.plan, m_modelFile);
  m_baseline->setMarkdown(comparisonMarkdown());
  m_operators->setPlan(c.plan, m_memoryFraction->value());
}

QString MainWindow::comparisonMarkdown() const {
  if (m_selected < 0 || !m_loadedModel || !m_loadedCluster) return "Select a plan.";
  const planner::Candidate& c = m_model->candidate(m_selected);
  auto base = planner::baselinePlan(planner::Baseline::kMegatron, *m_loadedModel, *m_loadedCluster, c.plan.globalBatchSize,
                                    c.plan.seqLen, c.plan.precision, m_memoryFraction->value(), c.plan.execution);
  QString md = q("# " + m_loadedModel->name() + " on " + m_loadedCluster->name + "\n\n");
  if (!base) return md + q("No Megatron-style baseline: " + base.error().toString());
  auto row = [](const char* what, const std::string& a, const std::string& b) { return q(std::string("| ") + what + " | " + a + " | " + b + " |\n"); };
  auto layout = [](const Plan& p) {
    const auto& q = p.parallel;
    return "tp " + std::to_string(q.tp) + ", pp " + std::to_string(q.pp) + ", dp " + std::to_string(q.dp) +
           (q.cp > 1 ? ", cp " + std::to_string(q.cp) : "") + (q.ep > 1 ? ", ep " + std::to_string(q.ep) : "") +
           (q.virtualStages > 1 ? ", vpp " + std::to_string(q.virtualStages) : "");
  };
  const auto& a = c.evaluation;
  const auto& b = base->evaluation;
  md += "| | selected plan | Megatron-style baseline |\n|---|---|---|\n";
  md += row("layout", layout(c.plan), layout(base->plan));
  md += row("schedule", toString(c.plan.schedule), toString(base->plan.schedule));
  md += row("micro-batch", std::to_string(c.plan.microBatchSize), std::to_string(base->plan.microBatchSize));
  md += row("ZeRO", std::to_string(c.plan.zeroStage), std::to_string(base->plan.zeroStage));
  md += row("recompute", planner::recomputeSummary(c.plan), planner::recomputeSummary(base->plan));
  md += row("step time", formatFixed(a.stepSeconds, 3) + " s", formatFixed(b.stepSeconds, 3) + " s");
  const costmodel::PredictionBands bandsA = costmodel::bandsOf(c.plan, a);
  const costmodel::PredictionBands bandsB = costmodel::bandsOf(base->plan, b);
  auto band = [](const std::optional<costmodel::ErrorBand>& e) { return e ? e->describe() : std::string("no similar validated run"); };
  md += row("likely measured step", band(bandsA.time), band(bandsB.time));
  md += row("MFU", formatFixed(100 * a.mfu, 1) + "%", formatFixed(100 * b.mfu, 1) + "%");
  md += row("peak memory per GPU", formatBytes(a.peakMemoryBytes), formatBytes(b.peakMemoryBytes));
  md += row("likely measured memory", band(bandsA.memory), band(bandsB.memory));
  auto fits = [](const costmodel::Evaluation& e, const costmodel::PredictionBands& bands) {
    return std::string(e.fits ? (bands.memoryAtRisk(e) ? "at risk (inside its memory error band)" : "yes") : "no");
  };
  md += row("fits", fits(a, bandsA), fits(b, bandsB));
  // A speed-up is only a speed-up between plans that run.
  if (!b.fits) {
    md += q("\nNo speed-up to give: the Megatron-style baseline does not fit (" + formatBytes(b.peakMemoryBytes) + " per GPU).\n\n");
  } else if (!a.fits) {
    md += q("\nNo speed-up to give: the selected plan does not fit (" + formatBytes(a.peakMemoryBytes) + " per GPU).\n\n");
  } else {
    md += q("\nSpeed-up over the baseline: " + formatFixed(b.stepSeconds / std::max(1e-12, a.stepSeconds), 2) + "x.\n\n");
  }
  md += q("Differences (baseline -> selected): " + planner::planDifferences(base->plan, c.plan) + "\n\nBaseline rules: " + base->rules + "\n");
  return md;
}

bool MainWindow::exportChart(const QString& file) {
  QWidget* w = m_details->currentWidget() == m_run ? static_cast<QWidget*>(m_pareto) : m_details->currentWidget();
  if (file.endsWith(".svg", Qt::CaseInsensitive)) {
    QSvgGenerator svg;
    svg.setFileName(file);
    svg.setSize(w->size());
    svg.setViewBox(QRect(QPoint(0, 0), w->size()));
    svg.setTitle("colo-studio");
    QPainter painter(&svg);
    w->render(&painter);
    return true;
  }
  return w->grab().save(file);
}

void MainWindow::showDetailTab(int index) { m_details->setCurrentIndex(index); }

bool MainWindow::savePlan(const QString& file) {
  if (m_selected < 0) {
    showError("Select a plan to save.");
    return false;
  }
  planner::Candidate c = m_model->candidate(m_selected);
  planner::annotate(c.plan, c.evaluation, "colo-studio", "");
  if (auto wrote = writeJsonFileAtomic(file.toStdString(), planToJson(c.plan)); !wrote) {
    showError(q(wrote.error().toString()));
    return false;
  }
  statusBar()->showMessage("saved " + file);
  return true;
}

void MainWindow::rememberRecent(const QString& file) {
  QSettings settings("colo", "colo-studio");
  QStringList recent = settings.value("recent").toStringList();
  recent.removeAll(file);
  recent.prepend(file);
  while (recent.size() > 10) recent.removeLast();
  settings.setValue("recent", recent);
  refreshRecentMenu();
}

void MainWindow::refreshRecentMenu() {
  if (!m_recentMenu) return;
  m_recentMenu->clear();
  QSettings settings("colo", "colo-studio");
  for (const QString& f : settings.value("recent").toStringList()) {
    m_recentMenu->addAction(f, this, [this, f] {
      if (!openModel(f)) openCluster(f);
    });
  }
}

void MainWindow::closeEvent(QCloseEvent* event) {
  QSettings settings("colo", "colo-studio");
  settings.setValue("geometry", saveGeometry());
  settings.setValue("state", saveState());
  m_runner->cancel();
  QMainWindow::closeEvent(event);
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
  if (event->mimeData()->hasUrls()) event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
  QStringList files;
  for (const QUrl& url : event->mimeData()->urls()) files << url.toLocalFile();
  event->acceptProposedAction();
  openFiles(files);
}

void MainWindow::openFiles(const QStringList& files) {
  for (const QString& f : files) {
    // A cluster file says "colo.cluster/1"; anything else is tried as a model.
    QFile in(f);
    const bool cluster = in.open(QIODevice::ReadOnly) && in.read(4096).contains("colo.cluster/");
    if (cluster) openCluster(f);
    else openModel(f);
  }
}

}  // namespace colo::ui
