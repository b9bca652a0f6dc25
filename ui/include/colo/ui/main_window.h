#pragma once
/// \file
/// colo-studio's window: open a model and a cluster, search plans in the background, explore the
/// candidates (table, Pareto chart), understand the selected plan (pipeline timeline, memory per stage,
/// device mesh, difference from the Megatron-style baseline), save it, profile and run it.

#include <QMainWindow>
#include <QTimer>

#include <optional>

#include "colo/core/model.h"
#include "colo/planner/search.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QFormLayout;
class QTabWidget;
class QTableView;
class QTextBrowser;

namespace colo::ui {

class CandidatesFilter;
class CandidatesModel;
class MemoryChart;
class MeshView;
class ParetoChart;
class OperatorView;
class RunPanel;
class SearchRunner;
class TimelineView;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  /// Loads a model by library name or file; a bad file shows its error inline and returns false.
  bool openModel(const QString& nameOrFile);
  bool openCluster(const QString& nameOrFile);
  /// What a drop does: each file opens as a cluster when it says colo.cluster/, else as a model.
  void openFiles(const QStringList& files);
  void setGlobalBatch(int samples);
  /// The attention kernels of every candidate: "flash", "flash2" or "unfused" (false for another name).
  bool setAttentionKernels(const QString& name);
  /// How the framework runs its small kernels, for every candidate: "fused" (Megatron-LM), "compiled"
  /// (torchtitan under torch.compile: the final norm eager) or "eager" (every norm, rotary and SwiGLU
  /// eager, PyTorch's cross-entropy); false for another name.
  bool setFrameworkKernels(const QString& name);
  /// Starts the planner in the background with the current constraints.
  void startSearch();
  void selectCandidate(int row);

  [[nodiscard]] SearchRunner* runner() const { return m_runner; }
  [[nodiscard]] CandidatesModel* candidates() const { return m_model; }
  [[nodiscard]] CandidatesFilter* filter() const { return m_filter; }
  [[nodiscard]] QString errorText() const;
  [[nodiscard]] int selected() const { return m_selected; }
  [[nodiscard]] RunPanel* runPanel() const { return m_run; }
  [[nodiscard]] OperatorView* operators() const { return m_operators; }
  [[nodiscard]] ParetoChart* pareto() const { return m_pareto; }
  [[nodiscard]] QTableView* table() const { return m_table; }
  /// The training budget fields (tokens such as "1.5T", dollars per GPU-hour).
  /// The training budget of the days, GPU-hours and cost columns (deadline 0: none; later plans read LATE).
  void setTrainingBudget(const QString& tokens, double pricePerGpuHour, double deadlineDays = 0);
  [[nodiscard]] TimelineView* timeline() const { return m_timeline; }
  /// The comparison of the selected plan with the Megatron-style baseline, as Markdown.
  [[nodiscard]] QString comparisonMarkdown() const;
  /// Saves the widget of the current detail tab as PNG or SVG (by suffix).
  bool exportChart(const QString& file);
  bool savePlan(const QString& file);
  /// Shows a detail tab: 0 timeline, 1 memory, 2 device mesh, 3 baseline, 4 profile and run.
  void showDetailTab(int index);

 protected:
  void closeEvent(QCloseEvent* event) override;
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

 private:
  void buildUi();
  QWidget* buildSetupPanel();
  void addSourceRows(QFormLayout* form);
  void addConstraintRows(QFormLayout* form);
  QWidget* buildCandidatesPanel();
  QTabWidget* buildDetailTabs();
  void connectSignals();
  void buildMenus();
  void showError(const QString& message);
  void clearError();
  void constraintsChanged();
  void budgetChanged();
  void showBudgetColumns(bool shown);
  void onSearchFinished();
  /// Selects (adding when new) the loaded entry in its picker, remembers the file, re-runs the search.
  void loaded(QComboBox* box, const QString& name, const QString& file, const QString& given);
  void rememberRecent(const QString& file);
  void refreshRecentMenu();
  void editCluster();
  [[nodiscard]] planner::SearchOptions options() const;

  std::optional<Model> m_loadedModel;
  std::optional<ClusterSpec> m_loadedCluster;
  QString m_modelFile;
  SearchRunner* m_runner = nullptr;
  CandidatesModel* m_model = nullptr;
  CandidatesFilter* m_filter = nullptr;
  int m_selected = -1;
  QTimer m_debounce;
  bool m_ready = false;

  QComboBox* m_modelBox = nullptr;
  QComboBox* m_clusterBox = nullptr;
  QLabel* m_error = nullptr;
  QLabel* m_summary = nullptr;
  QSpinBox* m_gbs = nullptr;
  QSpinBox* m_seq = nullptr;
  QComboBox* m_fixTp = nullptr;
  QComboBox* m_precision = nullptr;
  QComboBox* m_attention = nullptr;
  QComboBox* m_frameworkKernels = nullptr;
  QDoubleSpinBox* m_memoryFraction = nullptr;
  QLineEdit* m_trainTokens = nullptr;
  QDoubleSpinBox* m_price = nullptr;
  QDoubleSpinBox* m_deadline = nullptr;
  QCheckBox* m_live = nullptr;
  QPushButton* m_search = nullptr;
  QPushButton* m_cancel = nullptr;
  QProgressBar* m_progress = nullptr;
  QLineEdit* m_filterText = nullptr;
  QCheckBox* m_fitsOnly = nullptr;
  QTableView* m_table = nullptr;
  QTabWidget* m_details = nullptr;
  ParetoChart* m_pareto = nullptr;
  TimelineView* m_timeline = nullptr;
  MemoryChart* m_memory = nullptr;
  MeshView* m_mesh = nullptr;
  QTextBrowser* m_baseline = nullptr;
  RunPanel* m_run = nullptr;
  OperatorView* m_operators = nullptr;
  QMenu* m_recentMenu = nullptr;
};

}  // namespace colo::ui
