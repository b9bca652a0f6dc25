#pragma once
// Private: the phases colo-run --trace marks in its record of a rank's last steps (the recorder is
// colo/kernels/trace.h): forward, backward, gradient reduction, optimizer.
#include "colo/kernels/trace.h"

namespace colo::executor::detail {

/// The phase names the trainer marks (user scopes in the trace; scripts/gpu/trace_summary.py groups
/// the device's kernels by them).
inline constexpr const char* kPhaseForward = "colo:forward";
inline constexpr const char* kPhaseBackward = "colo:backward";
inline constexpr const char* kPhaseReduce = "colo:reduce";
inline constexpr const char* kPhaseOptimizer = "colo:optimizer";

/// The trainer's record of its last steps (colo-run --trace FILE).
using StepTrace = kernels::torch_ops::KinetoTrace;

}  // namespace colo::executor::detail
