#include "colo/costmodel/op_cost.h"

#include <algorithm>

#include "layer_cost.h"

namespace colo::costmodel {

double gemmSeconds(double m, double n, double k, double count, std::int64_t dtypeBytes, const DeviceModel& device) {
  return detail::gemmSeconds(m, n, k, count, dtypeBytes, device);
}

double streamSeconds(double bytes, const DeviceModel& device) {
  if (bytes <= 0) return 0.0;
  return std::max(device.kernelFloorSeconds, bytes / device.memoryBytesPerSecond);
}

FusedAttentionSeconds fusedAttentionSeconds(double flops, const DeviceModel& device) {
  if (flops <= 0) return {};
  // As the evaluator's FlashAttention (layer_cost.cpp): attention's own peak, the sustained clock and
  // the fused kernels' measured shares of it.
  const double rate = device.attentionPeakFlopsPerSecond * device.sustainedClock;
  const double floor = device.kernelFloorSeconds;
  return {std::max(floor, flops / (rate * device.flashFwdEfficiency)),
          std::max(floor, 2.5 * flops / (rate * device.flashBwdEfficiency))};
}

}  // namespace colo::costmodel
