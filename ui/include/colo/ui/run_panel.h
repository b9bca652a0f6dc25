#pragma once
/// \file
/// Profile and run from the window: starts colo-profile or colo-run (QProcess) on the selected plan,
/// streams the log, draws the loss curve and tokens/s live, shows predicted against measured when the
/// run ends, and lists past runs of a runs database.

#include <QProcess>
#include <QWidget>

#include "colo/core/plan.h"

class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace colo::ui {

class LossChart;

class RunPanel : public QWidget {
  Q_OBJECT
 public:
  explicit RunPanel(QWidget* parent = nullptr);
  /// The plan the Run button trains (saved to a temporary file when run).
  void setPlan(const Plan& plan, const QString& modelFile);
  void setDataFile(const QString& file);
  void setSteps(int steps);
  void setRunsDatabase(const QString& file);
  [[nodiscard]] QString log() const;
  [[nodiscard]] LossChart* lossChart() const { return m_loss; }
  [[nodiscard]] QTableWidget* resultTable() const { return m_result; }
  [[nodiscard]] QTableWidget* runsTable() const { return m_runs; }
  [[nodiscard]] bool busy() const;
  /// Whether colo-run executes the selected plan (its capability check); the Run button follows it.
  [[nodiscard]] bool runnable() const { return m_hasPlan && m_runnable; }
  /// Starts colo-run on the plan; false (with the reason in the log) when it cannot start.
  bool startRun();
  bool startProfile();
  void loadRuns();

 signals:
  void runFinished(int exitCode);
  void runsLoaded(int count);

 private:
  void start(const QString& program, const QStringList& arguments);
  void onStderr();
  void onFinished(int exitCode, QProcess::ExitStatus status);
  void showResult(const QByteArray& json);

  Plan m_plan;
  bool m_hasPlan = false;
  bool m_runnable = true;  // colo-run executes the plan (core/runnable.h)
  QString m_modelFile, m_planFile;
  QProcess m_process;
  QByteArray m_stdout, m_stderrTail;
  bool m_running = false, m_listing = false;
  QLineEdit* m_data = nullptr;
  QLineEdit* m_runsDb = nullptr;
  QSpinBox* m_steps = nullptr;
  QPushButton* m_run = nullptr;
  QPushButton* m_profile = nullptr;
  QPushButton* m_stop = nullptr;
  QProgressBar* m_progress = nullptr;
  QLabel* m_status = nullptr;
  QPlainTextEdit* m_log = nullptr;
  LossChart* m_loss = nullptr;
  QTableWidget* m_result = nullptr;
  QTableWidget* m_runs = nullptr;
};

}  // namespace colo::ui
