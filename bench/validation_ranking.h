#pragma once
/// \file
/// Does colo order the layouts of one model on one cluster as the measurements do? For each group of
/// evaluated runs that share a source, model shape, sequence length, GPU and GPU count (three runs or
/// more), Kendall's tau between predicted and measured time per sample, and how much slower, measured,
/// the layout colo predicts fastest is than the measured fastest.

#include <cstddef>
#include <string>
#include <vector>

#include "validation_harness.h"

namespace colo::validation {

struct GroupRanking {
  std::string group;           ///< source prefix and the shared configuration, e.g. "vtrain h1024 L24 a16 s1024 8xA100"
  std::size_t runs = 0;
  double kendallTau = 0;       ///< over pairs not tied in either order (-1..1)
  double pickSlowdown = 0;     ///< measured time of colo's fastest / the measured fastest - 1 (0: it picked the best)
};

/// `outcomes[i]` is the evaluation of `*outcomes[i].source`. Layer-only timings are left out.
[[nodiscard]] std::vector<GroupRanking> rankLayouts(const std::vector<Outcome>& outcomes);

/// Kendall's tau of two equally long sequences: (concordant - discordant) / (concordant + discordant),
/// pairs tied in either sequence left out; 0 when no pair is untied.
[[nodiscard]] double kendallTau(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace colo::validation
