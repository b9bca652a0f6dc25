#pragma once
/// \file
/// Runs the planner in the background (QtConcurrent) with progress and cancel; the window never waits.
/// A new start while a search runs cancels it and starts over (constraints edited live).

#include <QFutureWatcher>
#include <QObject>
#include <QString>

#include <memory>
#include <optional>

#include "colo/core/progress.h"
#include "colo/planner/search.h"

namespace colo::ui {

class SearchRunner : public QObject {
  Q_OBJECT
 public:
  explicit SearchRunner(QObject* parent = nullptr);
  ~SearchRunner() override;

  /// Starts a search (cancelling one that runs).
  void start(const Model& model, const ClusterSpec& cluster, const planner::SearchOptions& options);
  void cancel();
  [[nodiscard]] bool isRunning() const;
  /// The last finished search (valid after finished()).
  [[nodiscard]] const planner::SearchResult& result() const { return m_result; }
  /// Blocks until the current search ends (screenshots, tests).
  void waitForFinished();

 signals:
  void progress(int permille, const QString& what);
  void finished();
  void cancelled();
  void failed(const QString& message);

 private:
  struct Job;
  void launch();
  void onDone();
  std::shared_ptr<Job> m_job;      // the running search
  std::shared_ptr<Job> m_pending;  // started while another was being cancelled
  QFutureWatcher<void> m_watcher;
  bool m_busy = false;  // from start until finished/cancelled/failed is emitted
  planner::SearchResult m_result;
};

}  // namespace colo::ui
