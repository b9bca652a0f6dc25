#include "colo/ui/run_panel.h"

#include <QCoreApplication>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QRegularExpression>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>

#include "colo/core/json.h"
#include "colo/core/runnable.h"
#include "colo/core/units.h"
#include "colo/ui/charts.h"

namespace colo::ui {
namespace {

// colo-run and colo-profile: next to this program, or in $COLO_BIN_DIR.
QString program(const QString& name) {
  const QString here = QCoreApplication::applicationDirPath() + "/" + name;
  const QByteArray dir = qgetenv("COLO_BIN_DIR");
  if (!QFileInfo::exists(here) && !dir.isEmpty()) return QString::fromLocal8Bit(dir) + "/" + name;
  return here;
}

QString fixed(double v, int digits) { return QString::number(v, 'f', digits); }

}  // namespace

RunPanel::RunPanel(QWidget* parent) : QWidget(parent) {
  auto* form = new QFormLayout();
  m_data = new QLineEdit();
  m_data->setPlaceholderText("token file (.u16/.u32 or Megatron .bin); colo-run prepare makes one from text");
  auto* browse = new QPushButton("Browse…");
  auto* dataRow = new QHBoxLayout();
  dataRow->addWidget(m_data);
  dataRow->addWidget(browse);
  form->addRow("Data", dataRow);
  m_steps = new QSpinBox();
  m_steps->setRange(1, 1000000);
  m_steps->setValue(20);
  form->addRow("Steps", m_steps);
  m_runsDb = new QLineEdit(QDir::home().filePath(".colo-runs.sqlite"));
  auto* openRuns = new QPushButton("Show past runs");
  auto* runsRow = new QHBoxLayout();
  runsRow->addWidget(m_runsDb);
  runsRow->addWidget(openRuns);
  form->addRow("Runs database", runsRow);
  m_run = new QPushButton("Run plan (colo-run)");
  m_profile = new QPushButton("Profile model (colo-profile)");
  m_stop = new QPushButton("Stop");
  m_stop->setEnabled(false);
  auto* buttons = new QHBoxLayout();
  buttons->addWidget(m_run);
  buttons->addWidget(m_profile);
  buttons->addWidget(m_stop);
  m_progress = new QProgressBar();
  m_progress->setRange(0, 1);
  m_progress->setValue(0);
  buttons->addWidget(m_progress, 1);
  m_status = new QLabel("Select a plan, then run it on this machine's CPU ranks (Gloo).");
  m_status->setWordWrap(true);  // a long reason wraps rather than widening the window
  m_log = new QPlainTextEdit();
  m_log->setReadOnly(true);
  m_log->setMaximumBlockCount(5000);
  m_loss = new LossChart();
  m_loss->setMinimumHeight(180);  // room for the axes' ticks and titles
  m_result = new QTableWidget(0, 4);
  m_result->setHorizontalHeaderLabels({"", "predicted", "measured", "measured vs predicted"});
  m_result->horizontalHeader()->setStretchLastSection(true);
  m_result->verticalHeader()->hide();
  m_runs = new QTableWidget(0, 8);
  m_runs->setHorizontalHeaderLabels({"id", "started", "plan", "layout", "steps", "step time", "predicted", "final loss"});
  m_runs->horizontalHeader()->setStretchLastSection(true);
  m_runs->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  m_runs->verticalHeader()->hide();
  m_runs->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_runs->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_result->setEditTriggers(QAbstractItemView::NoEditTriggers);

  auto* right = new QSplitter(Qt::Vertical);
  right->addWidget(m_loss);
  right->addWidget(m_result);
  right->addWidget(m_runs);
  auto* split = new QSplitter(Qt::Horizontal);
  split->addWidget(m_log);
  split->addWidget(right);
  split->setStretchFactor(0, 1);  // the log a third, the charts and tables two
  split->setStretchFactor(1, 2);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(form);
  layout->addLayout(buttons);
  layout->addWidget(m_status);
  layout->addWidget(split, 1);

  connect(browse, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, "Token file", {}, "Token files (*.u16 *.u32 *.bin)");
    if (!f.isEmpty()) m_data->setText(f);
  });
  connect(m_run, &QPushButton::clicked, this, [this] { startRun(); });
  connect(m_profile, &QPushButton::clicked, this, [this] { startProfile(); });
  connect(m_stop, &QPushButton::clicked, this, [this] {
    m_process.terminate();  // colo-run stops its ranks on SIGTERM
  });
  connect(openRuns, &QPushButton::clicked, this, [this] { loadRuns(); });
  connect(&m_process, &QProcess::readyReadStandardError, this, &RunPanel::onStderr);
  connect(&m_process, &QProcess::readyReadStandardOutput, this, [this] { m_stdout += m_process.readAllStandardOutput(); });
  connect(&m_process, &QProcess::finished, this, &RunPanel::onFinished);
  connect(&m_process, &QProcess::errorOccurred, this, [this](QProcess::ProcessError) {
    if (m_process.state() == QProcess::NotRunning) m_log->appendPlainText("cannot start: " + m_process.errorString());
  });
  connect(m_runs, &QTableWidget::cellDoubleClicked, this, [this](int row, int) {
    const QVariant losses = m_runs->item(row, 0)->data(Qt::UserRole);
    m_loss->clear();
    int step = 1;
    for (const auto& v : losses.toList()) m_loss->addLoss(step++, v.toDouble());
  });
}

void RunPanel::setPlan(const Plan& plan, const QString& modelFile) {
  m_plan = plan;
  m_hasPlan = true;
  m_modelFile = modelFile;
  const auto& p = plan.parallel;
  QString layout = QString("tp %1 pp %2 dp %3").arg(p.tp).arg(p.pp).arg(p.dp);
  if (p.cp > 1) layout += QString(" cp %1").arg(p.cp);
  if (p.ep > 1) layout += QString(" ep %1").arg(p.ep);
  // A plan colo-run cannot execute, or would run on this machine only through a launcher, is not
  // offered to it: the button says why.
  auto runs = checkRunnable(plan);
  if (runs) runs = checkStartedByHand(plan);
  m_runnable = static_cast<bool>(runs);
  m_status->setText(QString("Plan: %1, %2 ranks").arg(layout).arg(p.tp * p.pp * p.dp * p.cp) +
                    (m_runnable ? QString() : QString(" (colo-run cannot execute it: %1)").arg(QString::fromStdString(runs.error().message))));
  if (!busy()) m_run->setEnabled(m_runnable);
  m_run->setToolTip(m_runnable ? QString() : QString::fromStdString(runs.error().message));
}

void RunPanel::setDataFile(const QString& file) { m_data->setText(file); }
void RunPanel::setSteps(int steps) { m_steps->setValue(steps); }
void RunPanel::setRunsDatabase(const QString& file) { m_runsDb->setText(file); }
QString RunPanel::log() const { return m_log->toPlainText(); }
bool RunPanel::busy() const { return m_process.state() != QProcess::NotRunning; }

void RunPanel::start(const QString& exe, const QStringList& arguments) {
  m_stdout.clear();
  m_stderrTail.clear();
  m_log->appendPlainText("$ " + exe + " " + arguments.join(' '));
  m_run->setEnabled(false);
  m_profile->setEnabled(false);
  m_stop->setEnabled(true);
  m_progress->setRange(0, 0);  // busy until the first step says how far
  m_process.start(exe, arguments);
}

bool RunPanel::startRun() {
  if (busy()) return false;
  if (!m_hasPlan) {
    m_log->appendPlainText("Select a plan first.");
    return false;
  }
  if (!m_runnable) {
    m_log->appendPlainText("colo-run cannot execute this plan: " + m_run->toolTip());
    return false;
  }
  if (m_data->text().isEmpty()) {
    m_log->appendPlainText("Choose a token file (colo-run prepare TEXT --out FILE.u16 makes one).");
    return false;
  }
  m_planFile = QDir::temp().filePath(QString("colo-studio-plan-%1.json").arg(QCoreApplication::applicationPid()));
  if (auto wrote = writeJsonFileAtomic(m_planFile.toStdString(), planToJson(m_plan)); !wrote) {
    m_log->appendPlainText(QString::fromStdString(wrote.error().toString()));
    return false;
  }
  m_loss->clear();
  m_result->setRowCount(0);
  m_running = true;
  m_listing = false;
  QStringList args{m_planFile, "--data", m_data->text(), "--steps", QString::number(m_steps->value()), "--json"};
  if (!m_runsDb->text().isEmpty()) args << "--runs-db" << m_runsDb->text();
  start(program("colo-run"), args);
  return true;
}

bool RunPanel::startProfile() {
  if (busy() || m_modelFile.isEmpty()) return false;
  m_running = false;
  m_listing = false;
  const QString db = QDir::home().filePath(".colo-cpu.sqlite");
  start(program("colo-profile"), {"--model", m_modelFile, "--db", db, "--resume", "--seq-len", QString::number(m_plan.seqLen)});
  return true;
}

void RunPanel::loadRuns() {
  if (busy()) return;
  m_running = false;
  m_listing = true;
  m_stdout.clear();
  m_process.start(program("colo-run"), {"runs", "--runs-db", m_runsDb->text(), "--json"});
}

void RunPanel::onStderr() {
  const QByteArray chunk = m_process.readAllStandardError();
  m_stderrTail = (m_stderrTail + chunk).right(4096);
  // colo-profile redraws its bar with \r; keep the log to whole lines.
  for (const QString& raw : QString::fromUtf8(chunk).split('\n', Qt::SkipEmptyParts)) {
    const QString line = raw.section('\r', -1).trimmed();
    if (line.isEmpty()) continue;
    static const QRegularExpression stepRe(R"(^step (\d+)/(\d+)\s+loss ([0-9.]+).*?([0-9.]+) tokens/s)");
    static const QRegularExpression percentRe(R"((\d+)%)");
    if (const auto m = stepRe.match(line); m.hasMatch()) {
      const int step = m.captured(1).toInt(), total = m.captured(2).toInt();
      m_loss->addLoss(step, m.captured(3).toDouble());
      m_progress->setRange(0, total);
      m_progress->setValue(step);
      m_status->setText(QString("step %1/%2, loss %3, %4 tokens/s").arg(step).arg(total).arg(m.captured(3)).arg(m.captured(4)));
    } else if (const auto p = percentRe.match(line); p.hasMatch() && !m_running) {
      m_progress->setRange(0, 100);
      m_progress->setValue(p.captured(1).toInt());
    }
    m_log->appendPlainText(line);
  }
}

void RunPanel::showResult(const QByteArray& json) {
  const QJsonObject r = QJsonDocument::fromJson(json).object();
  if (r.isEmpty()) return;
  auto row = [this](const QString& what, double predicted, double measured, bool bytes) {
    const int i = m_result->rowCount();
    m_result->insertRow(i);
    auto text = [bytes](double v) {
      return bytes ? QString::fromStdString(formatBytes(v)) : QString::fromStdString(formatFixed(v * 1e3, 1) + " ms");
    };
    m_result->setItem(i, 0, new QTableWidgetItem(what));
    m_result->setItem(i, 1, new QTableWidgetItem(text(predicted)));
    m_result->setItem(i, 2, new QTableWidgetItem(text(measured)));
    m_result->setItem(i, 3, new QTableWidgetItem(predicted > 0 ? fixed(100.0 * (measured - predicted) / predicted, 1) + "%" : "-"));
  };
  row("step time", r["predicted_step_time_s"].toDouble(), r["step_time_s"].toDouble(), false);
  row("peak memory", r["predicted_peak_memory_bytes"].toDouble(), r["peak_memory_bytes"].toDouble(), true);
  m_status->setText(QString("done: %1 tokens/s, final loss %2")
                        .arg(r["tokens_per_s"].toDouble(), 0, 'f', 0)
                        .arg(r["losses"].toArray().isEmpty() ? 0.0 : r["losses"].toArray().last().toDouble(), 0, 'f', 4));
}

void RunPanel::onFinished(int exitCode, QProcess::ExitStatus status) {
  m_stdout += m_process.readAllStandardOutput();
  m_run->setEnabled(m_runnable);
  m_profile->setEnabled(true);
  m_stop->setEnabled(false);
  m_progress->setRange(0, 1);
  m_progress->setValue(exitCode == 0 && status == QProcess::NormalExit ? 1 : 0);
  if (m_listing) {
    m_listing = false;
    if (exitCode != 0) {
      m_log->appendPlainText(QString::fromUtf8(m_process.readAllStandardError()));
      emit runsLoaded(-1);
      return;
    }
    const QJsonArray runs = QJsonDocument::fromJson(m_stdout).array();
    m_runs->setRowCount(0);
    for (const auto& v : runs) {
      const QJsonObject r = v.toObject();
      const int i = m_runs->rowCount();
      m_runs->insertRow(i);
      const QJsonObject par = r["parallel"].toObject();
      const QJsonArray losses = r["losses"].toArray();
      auto* id = new QTableWidgetItem(QString::number(r["id"].toInt()));
      id->setData(Qt::UserRole, losses.toVariantList());
      m_runs->setItem(i, 0, id);
      m_runs->setItem(i, 1, new QTableWidgetItem(r["started_at"].toString()));
      m_runs->setItem(i, 2, new QTableWidgetItem(r["plan"].toString()));
      m_runs->setItem(i, 3, new QTableWidgetItem(QString("tp%1 pp%2 dp%3").arg(par["tp"].toInt()).arg(par["pp"].toInt()).arg(par["dp"].toInt())));
      m_runs->setItem(i, 4, new QTableWidgetItem(QString::number(losses.size())));
      m_runs->setItem(i, 5, new QTableWidgetItem(fixed(r["step_time_s"].toDouble() * 1e3, 1) + " ms"));
      m_runs->setItem(i, 6, new QTableWidgetItem(fixed(r["predicted_step_time_s"].toDouble() * 1e3, 1) + " ms"));
      m_runs->setItem(i, 7, new QTableWidgetItem(losses.isEmpty() ? "-" : fixed(losses.last().toDouble(), 4)));
    }
    m_status->setText(QString("%1 past runs (double-click one for its loss curve)").arg(runs.size()));
    emit runsLoaded(static_cast<int>(runs.size()));
    return;
  }
  if (m_running && exitCode == 0) showResult(m_stdout);
  if (exitCode != 0 || status != QProcess::NormalExit) {
    m_status->setText(QString("failed (exit %1): see the log").arg(exitCode));
  } else if (!m_running) {
    m_status->setText("profiling done: use the database with colo-plan evaluate --costdb");
    m_log->appendPlainText(QString::fromUtf8(m_stdout));
  }
  m_running = false;
  emit runFinished(exitCode);
}

}  // namespace colo::ui
