#include "colo/ui/search_runner.h"

#include <QMetaObject>
#include <QtConcurrent/QtConcurrent>

namespace colo::ui {

// Everything one search needs, owned jointly by the runner and the worker thread.
struct SearchRunner::Job : ProgressSink {
  Model model;
  ClusterSpec cluster;
  planner::SearchOptions options;
  CancellationToken cancel;
  Result<planner::SearchResult> result = fail(Error::internal("not run"));
  QPointer<SearchRunner> owner;
  int lastPermille = -1;
  void progress(double fraction, std::string_view what) override {
    const int permille = static_cast<int>(fraction * 1000.0);
    if (permille == lastPermille || !owner) return;
    lastPermille = permille;
    const QString text = QString::fromUtf8(what.data(), static_cast<qsizetype>(what.size()));
    QMetaObject::invokeMethod(owner, [o = owner, permille, text] {
      if (o) emit o->progress(permille, text);
    }, Qt::QueuedConnection);
  }
};

SearchRunner::SearchRunner(QObject* parent) : QObject(parent) {
  connect(&m_watcher, &QFutureWatcher<void>::finished, this, &SearchRunner::onDone);
}

SearchRunner::~SearchRunner() {
  if (m_job) m_job->cancel.cancel();
  m_watcher.waitForFinished();
}

void SearchRunner::start(const Model& model, const ClusterSpec& cluster, const planner::SearchOptions& options) {
  auto job = std::make_shared<Job>();
  job->model = model;
  job->cluster = cluster;
  job->options = options;
  job->owner = this;
  if (m_busy && m_job) {
    m_job->cancel.cancel();
    m_pending = std::move(job);  // starts when the cancelled one returns
    return;
  }
  m_job = std::move(job);
  m_busy = true;
  launch();
}

void SearchRunner::launch() {
  auto job = m_job;
  m_watcher.setFuture(QtConcurrent::run([job] {
    job->result = planner::search(job->model, job->cluster, job->options, job.get(), &job->cancel);
  }));
}

void SearchRunner::cancel() {
  m_pending.reset();
  if (m_job) m_job->cancel.cancel();
}

bool SearchRunner::isRunning() const { return m_busy; }

void SearchRunner::waitForFinished() {
  while (m_busy) {
    m_watcher.waitForFinished();
    QCoreApplication::processEvents();  // delivers the watcher's finished (and starts a pending search)
  }
}

void SearchRunner::onDone() {
  auto job = std::move(m_job);
  if (m_pending) {
    m_job = std::move(m_pending);
    launch();
    return;
  }
  m_busy = false;
  if (!job) return;
  if (job->cancel.cancelled()) {
    emit cancelled();
  } else if (!job->result) {
    emit failed(QString::fromStdString(job->result.error().toString()));
  } else {
    m_result = std::move(*job->result);
    emit finished();
  }
}

}  // namespace colo::ui
