#include "validation_ranking.h"

#include <algorithm>
#include <map>
#include <sstream>

namespace colo::validation {

double kendallTau(const std::vector<double>& a, const std::vector<double>& b) {
  double concordant = 0, discordant = 0;
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = i + 1; j < n; ++j) {
      const double da = a[i] - a[j];
      const double db = b[i] - b[j];
      if (da == 0 || db == 0) continue;
      ((da > 0) == (db > 0) ? concordant : discordant) += 1;
    }
  }
  return concordant + discordant > 0 ? (concordant - discordant) / (concordant + discordant) : 0.0;
}

namespace {

std::string groupKey(const Case& c) {
  std::ostringstream key;
  // The source: the citation up to its first comma, quote or parenthesis ("Bang et al.", "MooreThreads/SimuMax").
  const std::size_t end = c.citation.find_first_of(",'(\"");
  std::string source = c.citation.substr(0, end);
  while (!source.empty() && source.back() == ' ') source.pop_back();
  for (auto& ch : source) {
    if (ch == ' ') ch = '_';  // one word: the report groups by the text before the first space
  }
  key << (source.empty() ? c.id.substr(0, c.id.find('_')) : source);
  const Plan& p = c.plan;
  if (p.model.spec) {
    const ModelSpec& s = *p.model.spec;
    key << " h" << s.hiddenSize << " L" << s.numLayers << " a" << s.numAttentionHeads;
    if (s.moe.enabled()) key << " e" << s.moe.numExperts;
  } else {
    key << " " << p.model.name();
  }
  key << " s" << p.seqLen << " " << p.cluster.totalGpus() << "x" << p.cluster.gpu.name;
  return key.str();
}

}  // namespace

std::vector<GroupRanking> rankLayouts(const std::vector<Outcome>& outcomes) {
  std::map<std::string, std::vector<const Outcome*>> groups;
  for (const auto& o : outcomes) {
    if (!o.source || o.source->layerOnly || o.measuredSeconds <= 0 || o.source->plan.globalBatchSize < 1) continue;
    groups[groupKey(*o.source)].push_back(&o);
  }
  std::vector<GroupRanking> out;
  for (const auto& [key, members] : groups) {
    if (members.size() < 3) continue;
    std::vector<double> predicted, measured;
    for (const Outcome* o : members) {
      const double samples = static_cast<double>(o->source->plan.globalBatchSize);
      predicted.push_back(o->predictedStepSeconds / samples);
      measured.push_back(o->measuredSeconds / samples);
    }
    GroupRanking g;
    g.group = key;
    g.runs = members.size();
    g.kendallTau = kendallTau(predicted, measured);
    const auto pick = std::min_element(predicted.begin(), predicted.end()) - predicted.begin();
    const double best = *std::min_element(measured.begin(), measured.end());
    g.pickSlowdown = measured[static_cast<std::size_t>(pick)] / best - 1.0;
    out.push_back(g);
  }
  return out;
}

}  // namespace colo::validation
