// Judging: a published run's plan evaluated and compared with what was measured, like with like.
#include "validation_harness.h"

#include <algorithm>

#include "colo/costmodel/evaluator.h"

namespace colo::validation {

Result<Outcome> evaluateCase(const Case& c) {
  auto ev = costmodel::evaluatePlan(c.plan);
  if (!ev) return fail(ev.error());
  Outcome o;
  o.source = &c;
  if (c.layerOnly) {
    // One layer's forward and backward, as the source timed them: the first stage with one more layer,
    // less the first stage as it is. The difference leaves out the embedding, the final norm and
    // anything else around the layers (at tp 8 and 2048 tokens they are 6% of a 22B layer).
    Plan more = c.plan;
    if (!more.model.spec) return fail(Error::badInput(c.id + ": a layer timing needs the model's shape"));
    more.model.spec->numLayers += 1;
    StagePlan& first = more.stages.front();
    if (first.recomputeLayers == first.layers) first.recomputeLayers += 1;
    first.layers += 1;
    auto ev2 = costmodel::evaluatePlan(more);
    if (!ev2) return fail(ev2.error());
    o.predictedForwardSeconds = ev2->stages.front().forwardSeconds - ev->stages.front().forwardSeconds;
    o.predictedBackwardSeconds = ev2->stages.front().backwardSeconds - ev->stages.front().backwardSeconds;
    o.predictedStepSeconds = *o.predictedForwardSeconds + *o.predictedBackwardSeconds;
  } else {
    o.predictedStepSeconds = ev->stepSeconds;
  }
  o.predictedToFit = ev->fits;
  o.measuredSeconds = c.measuredStepSeconds.value_or(0);
  o.stepError = o.measuredSeconds > 0 ? (o.predictedStepSeconds - o.measuredSeconds) / o.measuredSeconds : 0;
  if (c.measuredMemoryBytes) {
    // Compare like with like (predictedMemory).
    o.predictedMemoryBytes = predictedMemory(*ev, c.memoryMeasure);
    o.memoryError = (*o.predictedMemoryBytes - *c.measuredMemoryBytes) / *c.measuredMemoryBytes;
  }
  if (c.measuredReservedBytes) {
    o.predictedReservedBytes = predictedMemory(*ev, MemoryMeasure::kReserved);
    o.reservedError = (*o.predictedReservedBytes - *c.measuredReservedBytes) / *c.measuredReservedBytes;
  }
  return o;
}

double predictedMemory(const costmodel::Evaluation& ev, MemoryMeasure measure) {
  double predicted = 0;
  for (const auto& st : ev.stages) {
    const auto& m = st.memory;
    double here = m.total();
    if (measure != MemoryMeasure::kDevice) here -= m.context;
    if (measure == MemoryMeasure::kAllocated) here -= m.allocator;
    predicted = std::max(predicted, here);
  }
  return predicted;
}


Result<costmodel::RunObservation> observationOf(const Case& c) {
  if (c.layerOnly) return fail(Error::badInput(c.id + ": a single-layer timing is no step to calibrate on"));
  auto outcome = evaluateCase(c);
  if (!outcome) return fail(outcome.error());
  auto ev = costmodel::evaluatePlan(c.plan);
  if (!ev) return fail(ev.error());
  costmodel::RunObservation o = costmodel::observe(c.id, *ev, outcome->measuredSeconds);
  o.predictedMemoryBytes = outcome->predictedMemoryBytes;
  o.measuredMemoryBytes = c.measuredMemoryBytes;
  return o;
}

}  // namespace colo::validation
