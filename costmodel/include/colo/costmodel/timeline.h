#pragma once
/// \file
/// Event-level simulation of a pipeline schedule: every forward and backward of every micro-batch on
/// every stage, with its start and end, so a timeline can be drawn and the bubble measured. The
/// closed form in evaluator.h is what search uses; this is what a user looks at.

#include <cstdint>
#include <string>
#include <vector>

#include "colo/core/error.h"
#include "colo/core/json.h"
#include "colo/core/plan.h"
#include "colo/costmodel/evaluator.h"

namespace colo::costmodel {

enum class TaskKind { kForward, kBackward, kBackwardInput, kBackwardWeight };
[[nodiscard]] std::string toString(TaskKind kind);  ///< F, B, Bi, W

struct TimelineEvent {
  std::int64_t stage = 0;       ///< physical pipeline stage
  std::int64_t chunk = 0;       ///< model chunk (0..pp*v-1); chunk c runs on stage c % pp
  std::int64_t microBatch = 0;
  TaskKind kind = TaskKind::kForward;
  double startSeconds = 0;
  double endSeconds = 0;
  double recomputeSeconds = 0;  ///< the first part of a backward, replaying the forward (full or selective recompute)
  double commSeconds = 0;       ///< the last part: exposed tensor/context/expert/pipeline communication
};

struct Timeline {
  std::vector<TimelineEvent> events;
  double makespanSeconds = 0;           ///< first forward to last backward
  std::vector<double> busySeconds;      ///< per stage
  double bubbleFraction = 0;            ///< idle share of the slowest stage's span
  [[nodiscard]] Json toJson() const;
  /// A text Gantt chart about `width` columns wide: one row per stage; F forward, B backward, R the
  /// recompute that opens a backward, W deferred weight gradients, c exposed communication, '.' idle.
  /// When a forward would be narrower than two columns, the chart keeps its time scale readable and
  /// shows three windows, the warm-up, the middle of the steady state and the cool-down, with what lies
  /// between them elided (`~`); a last line says how long a column is and what was elided.
  [[nodiscard]] std::string renderAscii(std::size_t width) const;
};

/// Per-chunk costs of one micro-batch.
struct ScheduleInput {
  Schedule schedule = Schedule::kOneFOneB;
  std::int64_t pp = 1;
  std::int64_t virtualStages = 1;
  std::int64_t microBatches = 1;
  std::vector<double> forwardSeconds;   ///< per chunk (pp * v)
  std::vector<double> backwardSeconds;  ///< per chunk, including recompute
  std::vector<double> recomputeSeconds; ///< per chunk, the part of backwardSeconds that recomputes (may be empty)
  double commShare = 0;                 ///< part of each forward and backward that is exposed communication
  double weightGradientShare = 0.5;     ///< part of backward that is weight gradients (zero bubble defers it)
  double p2pSeconds = 0;                ///< activation transfer between consecutive chunks
};

/// Simulates the schedule. Errors: kBadInput for inconsistent inputs (chunk count, interleaved with a
/// micro-batch count not a multiple of pp), kInternal if the schedule deadlocks (a bug).
[[nodiscard]] Result<Timeline> simulateSchedule(const ScheduleInput& input);

/// The schedule input of an evaluated plan: each physical stage's per-micro-batch forward and backward
/// split evenly over its chunks.
[[nodiscard]] ScheduleInput scheduleInputOf(const Plan& plan, const Evaluation& evaluation);

}  // namespace colo::costmodel
