#include "colo/core/rank_layout.h"

namespace colo {

std::int64_t& RankCoordinates::along(const std::string& dim) {
  if (dim == "tp") return tp;
  if (dim == "cp") return cp;
  if (dim == "dp") return dp;
  return pp;
}

std::int64_t parallelDegree(const Parallelism& p, const std::string& dim) {
  if (dim == "tp") return p.tp;
  if (dim == "cp") return p.cp;
  if (dim == "dp") return p.dp;
  return p.pp;
}

RankCoordinates coordinatesOf(std::int64_t rank, const Parallelism& p) {
  RankCoordinates c;
  for (const auto& d : p.rankOrder) {
    const std::int64_t n = parallelDegree(p, d);
    c.along(d) = rank % n;
    rank /= n;
  }
  return c;
}

std::int64_t rankOf(RankCoordinates c, const Parallelism& p) {
  std::int64_t rank = 0, stride = 1;
  for (const auto& d : p.rankOrder) {
    rank += c.along(d) * stride;
    stride *= parallelDegree(p, d);
  }
  return rank;
}

std::string rankOrderText(const Parallelism& p) {
  std::string order;
  for (const auto& d : p.rankOrder) order += (order.empty() ? "" : "-") + d;
  return order;
}

}  // namespace colo
