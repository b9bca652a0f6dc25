// Pipeline schedules as ordered task lists per stage, executed by a list scheduler: a stage runs its
// next task as soon as the task's inputs have arrived. The zero-bubble schedule follows ZB-H1 (Qi et al.
// 2024): backward is split into the input gradient (on the critical path) and the weight gradient, and
// stage s defers its first pp - s - 1 weight gradients into the cool-down, where 1F1B leaves bubbles.
#include "colo/costmodel/timeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

namespace colo::costmodel {
namespace {

struct Task {
  TaskKind kind;
  std::int64_t microBatch;
  std::int64_t chunk;
};

// Megatron's interleaved order: the k-th forward (or backward) of a stage.
Task interleavedTask(std::int64_t k, std::int64_t stage, std::int64_t pp, std::int64_t v, bool forward) {
  const std::int64_t group = k / (pp * v);
  const std::int64_t inGroup = k % (pp * v);
  std::int64_t chunkIndex = inGroup / pp;
  if (!forward) chunkIndex = v - 1 - chunkIndex;
  const std::int64_t mb = group * pp + inGroup % pp;
  return Task{forward ? TaskKind::kForward : TaskKind::kBackward, mb, chunkIndex * pp + stage};
}

std::vector<Task> stageOrder(const ScheduleInput& in, std::int64_t stage) {
  const std::int64_t pp = in.pp;
  const std::int64_t v = in.virtualStages;
  const std::int64_t m = in.microBatches;
  std::vector<Task> order;
  const TaskKind backward = in.schedule == Schedule::kZeroBubble ? TaskKind::kBackwardInput : TaskKind::kBackward;
  switch (in.schedule) {
    case Schedule::kGpipe:
      for (std::int64_t i = 0; i < m; ++i) order.push_back({TaskKind::kForward, i, stage});
      for (std::int64_t i = m - 1; i >= 0; --i) order.push_back({TaskKind::kBackward, i, stage});
      break;
    case Schedule::kOneFOneB: {
      const std::int64_t warm = std::min(pp - stage - 1, m);
      for (std::int64_t i = 0; i < warm; ++i) order.push_back({TaskKind::kForward, i, stage});
      for (std::int64_t i = 0; i < m - warm; ++i) {
        order.push_back({TaskKind::kForward, warm + i, stage});
        order.push_back({backward, i, stage});
      }
      for (std::int64_t i = m - warm; i < m; ++i) order.push_back({backward, i, stage});
      break;
    }
    case Schedule::kZeroBubble: {
      const std::int64_t warm = std::min(pp - stage - 1, m);
      std::int64_t nextW = 0;
      for (std::int64_t i = 0; i < warm; ++i) order.push_back({TaskKind::kForward, i, stage});
      for (std::int64_t i = 0; i < m - warm; ++i) {
        order.push_back({TaskKind::kForward, warm + i, stage});
        order.push_back({backward, i, stage});
        if (i >= warm) order.push_back({TaskKind::kBackwardWeight, nextW++, stage});
      }
      // Cool-down: each wait for the next input gradient is about one forward-plus-backward long, room for
      // two deferred weight gradients.
      for (std::int64_t i = m - warm; i < m; ++i) {
        order.push_back({backward, i, stage});
        for (int k = 0; k < 2 && nextW <= i; ++k) order.push_back({TaskKind::kBackwardWeight, nextW++, stage});
      }
      while (nextW < m) order.push_back({TaskKind::kBackwardWeight, nextW++, stage});
      break;
    }
    case Schedule::kInterleaved: {
      const std::int64_t total = m * v;
      const std::int64_t warm = std::min((pp - stage - 1) * 2 + (v - 1) * pp, total);
      for (std::int64_t k = 0; k < warm; ++k) order.push_back(interleavedTask(k, stage, pp, v, true));
      for (std::int64_t k = 0; k < total - warm; ++k) {
        order.push_back(interleavedTask(warm + k, stage, pp, v, true));
        order.push_back(interleavedTask(k, stage, pp, v, false));
      }
      for (std::int64_t k = total - warm; k < total; ++k) order.push_back(interleavedTask(k, stage, pp, v, false));
      break;
    }
  }
  return order;
}

}  // namespace

std::string toString(TaskKind kind) {
  switch (kind) {
    case TaskKind::kForward: return "F";
    case TaskKind::kBackward: return "B";
    case TaskKind::kBackwardInput: return "Bi";
    case TaskKind::kBackwardWeight: return "W";
  }
  return "?";
}

Result<Timeline> simulateSchedule(const ScheduleInput& in) {
  const std::int64_t pp = in.pp;
  const std::int64_t v = in.virtualStages;
  const std::int64_t m = in.microBatches;
  const std::int64_t chunks = pp * v;
  if (pp < 1 || v < 1 || m < 1 || static_cast<std::int64_t>(in.forwardSeconds.size()) != chunks ||
      static_cast<std::int64_t>(in.backwardSeconds.size()) != chunks) {
    return fail(Error::badInput("schedule input needs pp*v forward and backward times and at least one micro-batch"));
  }
  if (in.schedule == Schedule::kInterleaved && m % pp != 0) {
    return fail(Error::badInput("the interleaved schedule needs the micro-batch count (" + std::to_string(m) +
                                ") to be a multiple of pp " + std::to_string(pp)));
  }
  if (in.schedule != Schedule::kInterleaved && v != 1) {
    return fail(Error::badInput("virtual stages need the interleaved schedule"));
  }
  const bool zb = in.schedule == Schedule::kZeroBubble;
  const double wShare = zb ? std::clamp(in.weightGradientShare, 0.0, 1.0) : 0.0;

  // End times of finished forwards and (input-)backwards, by (chunk, micro-batch).
  auto key = [&](std::int64_t chunk, std::int64_t mb) { return chunk * m + mb; };
  const double unknown = -1.0;
  std::vector<double> forwardEnd(static_cast<std::size_t>(chunks * m), unknown);
  std::vector<double> backwardEnd(static_cast<std::size_t>(chunks * m), unknown);

  std::vector<std::vector<Task>> orders;
  for (std::int64_t s = 0; s < pp; ++s) orders.push_back(stageOrder(in, s));
  std::vector<std::size_t> next(static_cast<std::size_t>(pp), 0);
  std::vector<double> free(static_cast<std::size_t>(pp), 0.0);

  Timeline tl;
  tl.busySeconds.assign(static_cast<std::size_t>(pp), 0.0);
  std::size_t remaining = 0;
  for (const auto& o : orders) remaining += o.size();

  const double commShare = std::clamp(in.commShare, 0.0, 1.0);
  auto emit = [&](std::int64_t s, const Task& t, double start, double duration) {
    const double end = start + duration;
    TimelineEvent e{s, t.chunk, t.microBatch, t.kind, start, end};
    if (t.kind != TaskKind::kBackwardWeight) {
      e.commSeconds = duration * commShare;
      const auto c = static_cast<std::size_t>(t.chunk);
      if (t.kind != TaskKind::kForward && c < in.recomputeSeconds.size()) {
        e.recomputeSeconds = std::min(in.recomputeSeconds[c], duration - e.commSeconds);
      }
    }
    tl.events.push_back(e);
    free[static_cast<std::size_t>(s)] = end;
    tl.busySeconds[static_cast<std::size_t>(s)] += duration;
    --remaining;
    return end;
  };

  while (remaining > 0) {
    bool progressed = false;
    for (std::int64_t s = 0; s < pp; ++s) {
      const auto si = static_cast<std::size_t>(s);
      while (next[si] < orders[si].size()) {
        const Task& t = orders[si][next[si]];
        // When the inputs of t arrive (unknown if their producer has not run yet).
        double ready = 0;
        bool known = true;
        if (t.kind == TaskKind::kForward) {
          if (t.chunk > 0) {
            const double e = forwardEnd[static_cast<std::size_t>(key(t.chunk - 1, t.microBatch))];
            if (e == unknown) known = false; else ready = e + in.p2pSeconds;
          }
        } else {
          const double own = forwardEnd[static_cast<std::size_t>(key(t.chunk, t.microBatch))];
          if (own == unknown) known = false; else ready = own;
          if (t.chunk < chunks - 1) {
            const double e = backwardEnd[static_cast<std::size_t>(key(t.chunk + 1, t.microBatch))];
            if (e == unknown) known = false; else ready = std::max(ready, e + in.p2pSeconds);
          }
        }
        if (t.kind == TaskKind::kBackwardWeight) {  // needs only its own input gradient, already run here
          emit(s, t, free[si], in.backwardSeconds[static_cast<std::size_t>(t.chunk)] * wShare);
          ++next[si];
          progressed = true;
          continue;
        }
        if (!known) break;
        const double start = std::max(free[si], ready);
        const auto c = static_cast<std::size_t>(t.chunk);
        if (t.kind == TaskKind::kForward) {
          forwardEnd[static_cast<std::size_t>(key(t.chunk, t.microBatch))] = emit(s, t, start, in.forwardSeconds[c]);
        } else {
          const double duration = in.backwardSeconds[c] * (1.0 - wShare);
          backwardEnd[static_cast<std::size_t>(key(t.chunk, t.microBatch))] = emit(s, t, start, duration);
        }
        ++next[si];
        progressed = true;
      }
    }
    if (!progressed) return fail(Error::internal("pipeline schedule deadlocked (a bug in the schedule order)"));
  }

  double first = std::numeric_limits<double>::max();
  double last = 0;
  for (const auto& e : tl.events) {
    first = std::min(first, e.startSeconds);
    last = std::max(last, e.endSeconds);
  }
  tl.makespanSeconds = last - first;
  const double maxBusy = *std::max_element(tl.busySeconds.begin(), tl.busySeconds.end());
  tl.bubbleFraction = tl.makespanSeconds > 0 ? 1.0 - maxBusy / tl.makespanSeconds : 0.0;
  return tl;
}

ScheduleInput scheduleInputOf(const Plan& plan, const Evaluation& ev) {
  ScheduleInput in;
  in.schedule = plan.schedule;
  in.pp = plan.parallel.pp;
  in.virtualStages = plan.parallel.virtualStages;
  in.microBatches = ev.microBatches;
  const std::int64_t chunks = in.pp * in.virtualStages;
  in.forwardSeconds.resize(static_cast<std::size_t>(chunks));
  in.backwardSeconds.resize(static_cast<std::size_t>(chunks));
  in.recomputeSeconds.resize(static_cast<std::size_t>(chunks));
  for (std::int64_t c = 0; c < chunks; ++c) {
    const StageReport& st = ev.stages[static_cast<std::size_t>(c % in.pp)];
    const auto v = static_cast<double>(in.virtualStages);
    in.forwardSeconds[static_cast<std::size_t>(c)] = st.forwardSeconds / v;
    in.backwardSeconds[static_cast<std::size_t>(c)] = st.backwardSeconds / v;
    in.recomputeSeconds[static_cast<std::size_t>(c)] = st.recomputeSeconds / v;
  }
  // The breakdown's exposed communication against all the work it sits in.
  const auto& tb = ev.time;
  const double comm = tb.tpComm + tb.cpComm + tb.epComm + tb.ppComm;
  const double work = tb.compute + tb.recompute + comm;
  in.commShare = work > 0 ? comm / work : 0.0;
  return in;
}

Json Timeline::toJson() const {
  Json list = Json::array();
  for (const auto& e : events) {
    list.push_back({{"stage", e.stage}, {"chunk", e.chunk}, {"micro_batch", e.microBatch}, {"kind", toString(e.kind)},
                    {"start_s", e.startSeconds}, {"end_s", e.endSeconds}});
  }
  return {{"makespan_s", makespanSeconds}, {"busy_s", busySeconds}, {"bubble_fraction", bubbleFraction}, {"events", list}};
}

namespace {

// What each column of one stage's row shows: the activity that filled most of its time slice, idle ('.')
// unless work fills at least half of it.
struct Marks {
  double slice = 0;
  double origin = 0;
  std::size_t columns = 0;
  std::vector<std::vector<std::map<char, double>>> share;  // [stage][column] -> seconds

  void add(std::size_t stage, char mark, double from, double to) {
    if (to <= from) return;
    auto col = static_cast<std::size_t>(std::max(0.0, (from - origin) / slice));
    for (; col < columns; ++col) {
      const double lo = std::max(from, origin + static_cast<double>(col) * slice);
      const double hi = std::min(to, origin + static_cast<double>(col + 1) * slice);
      if (hi <= lo) break;
      share[stage][col][mark] += hi - lo;
    }
  }

  [[nodiscard]] std::string row(std::size_t stage) const {
    std::string out;
    for (std::size_t col = 0; col < columns; ++col) {
      char best = '.';
      double most = slice * 0.5;
      for (const auto& [mark, t] : share[stage][col]) {
        if (t >= most) {
          most = t;
          best = mark;
        }
      }
      out += best;
    }
    return out;
  }
};

Marks markWindow(const Timeline& tl, double origin, double slice, std::size_t columns) {
  Marks m{slice, origin, columns, std::vector<std::vector<std::map<char, double>>>(
                                      tl.busySeconds.size(), std::vector<std::map<char, double>>(columns))};
  for (const auto& e : tl.events) {
    const auto stage = static_cast<std::size_t>(e.stage);
    const char work = e.kind == TaskKind::kForward ? 'F' : e.kind == TaskKind::kBackwardWeight ? 'W' : 'B';
    const double recomputeEnd = e.startSeconds + e.recomputeSeconds;
    const double commStart = e.endSeconds - e.commSeconds;
    m.add(stage, 'R', e.startSeconds, recomputeEnd);
    m.add(stage, work, recomputeEnd, commStart);
    m.add(stage, 'c', commStart, e.endSeconds);
  }
  return m;
}

std::string formatSpan(double seconds) {
  char buf[32];
  if (seconds >= 1) {
    std::snprintf(buf, sizeof buf, "%.2f s", seconds);
  } else if (seconds >= 1e-3) {
    std::snprintf(buf, sizeof buf, "%.2f ms", seconds * 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f us", seconds * 1e6);
  }
  return buf;
}

}  // namespace

std::string Timeline::renderAscii(std::size_t width) const {
  if (events.empty() || makespanSeconds <= 0 || width < 8) return {};
  double first = events.front().startSeconds;
  double shortest = makespanSeconds;
  for (const auto& e : events) {
    first = std::min(first, e.startSeconds);
    if (e.endSeconds > e.startSeconds) shortest = std::min(shortest, e.endSeconds - e.startSeconds);
  }
  const std::size_t stages = busySeconds.size();
  auto label = [](std::size_t s) { return "  stage " + std::to_string(s) + (s < 10 ? "  |" : " |"); };
  std::string out;
  // Whole span at once while the shortest task still gets two columns.
  if (makespanSeconds / static_cast<double>(width) <= shortest / 2) {
    const double slice = makespanSeconds / static_cast<double>(width);
    const Marks m = markWindow(*this, first, slice, width);
    for (std::size_t s = 0; s < stages; ++s) out += label(s) + m.row(s) + "|\n";
    out += "  one column = " + formatSpan(slice) + "\n";
    return out;
  }
  // Otherwise three windows at a scale where the shortest task spans two columns: the warm-up, the
  // middle of the steady state and the cool-down.
  const double slice = shortest / 2;
  const std::size_t part = (width - 6) / 3;
  const double span = static_cast<double>(part) * slice;
  const Marks head = markWindow(*this, first, slice, part);
  const Marks middle = markWindow(*this, first + (makespanSeconds - span) / 2, slice, part);
  const Marks tail = markWindow(*this, first + makespanSeconds - span, slice, part);
  for (std::size_t s = 0; s < stages; ++s) {
    out += label(s) + head.row(s) + " ~ " + middle.row(s) + " ~ " + tail.row(s) + "|\n";
  }
  const double elided = makespanSeconds - 3 * span;
  out += "  one column = " + formatSpan(slice) + "; start, middle and end of the span, ~ elides " + formatSpan(elided) +
         " of steady state (" + std::to_string(static_cast<int>(std::lround(100 * elided / makespanSeconds))) +
         "% of the span)\n";
  return out;
}

}  // namespace colo::costmodel
