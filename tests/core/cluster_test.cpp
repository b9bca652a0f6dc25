#include "colo/core/cluster.h"

#include <cmath>

#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "colo/core/library.h"
#include "colo/core/model.h"
#include "core/test_support.h"

namespace colo {
namespace {

ClusterSpec library(const std::string& name) { return test::loadClusterOrFail(test::dataFile("clusters/" + name + ".json")); }

bool near(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b)); }

TEST(Cluster, EveryLibraryClusterLoadsAndRoundTrips) {
  const auto entries = libraryEntries(LibraryKind::kClusters);
  ASSERT_GE(entries.size(), 10u);
  for (const auto& name : entries) {
    const ClusterSpec c = library(name);
    auto back = clusterFromJson(clusterToJson(c), "rt.json");
    ASSERT_TRUE(back) << name << ": " << back.error().toString();
    EXPECT_EQ(back->name, c.name);
    EXPECT_EQ(back->totalGpus(), c.totalGpus());
    ASSERT_EQ(back->links.size(), c.links.size());
    for (std::size_t i = 0; i < c.links.size(); ++i) {
      EXPECT_EQ(back->links[i].spanGpus, c.links[i].spanGpus);
      EXPECT_TRUE(near(back->links[i].bytesPerSecond, c.links[i].bytesPerSecond));
      EXPECT_TRUE(near(back->links[i].latencySeconds, c.links[i].latencySeconds));
    }
    EXPECT_TRUE(near(back->gpu.memoryBytes, c.gpu.memoryBytes));
    EXPECT_EQ(back->gpu.peakFlopsPerSecond.size(), c.gpu.peakFlopsPerSecond.size());
  }
}

TEST(Cluster, FiguresCarryTheirUnits) {
  const ClusterSpec c = library("dgx-a100-80gb-x128");
  EXPECT_EQ(c.totalGpus(), 1024);
  EXPECT_DOUBLE_EQ(c.gpu.memoryBytes, 80.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(c.gpu.peakFlopsPerSecond.at(DType::kBf16), 312e12);
  EXPECT_DOUBLE_EQ(c.links.front().bytesPerSecond, 300e9);
  EXPECT_DOUBLE_EQ(c.links.back().latencySeconds, 5e-6);
  EXPECT_EQ(c.links.back().spanGpus, 1024);  // span 0 in the file: the whole cluster
  EXPECT_EQ(&c.levelBetween(3, 5), &c.links[0]);
  EXPECT_EQ(&c.levelBetween(3, 8), &c.links[1]);
}

TEST(Cluster, ScalesToWholeNodesOrPartOfOne) {
  const ClusterSpec c = library("dgx-a100-80gb-x128");
  auto down = scaleCluster(c, 64);
  ASSERT_TRUE(down);
  EXPECT_EQ(down->nodes, 8);
  EXPECT_EQ(down->links.back().spanGpus, 64);
  auto inNode = scaleCluster(c, 4);
  ASSERT_TRUE(inNode);
  EXPECT_EQ(inNode->nodes, 1);
  EXPECT_EQ(inNode->gpusPerNode, 4);
  ASSERT_EQ(inNode->links.size(), 1u);  // no network inside one partial node
  EXPECT_EQ(inNode->links[0].name, "nvlink");
  auto up = scaleCluster(library("dgx-h100"), 16384);
  ASSERT_FALSE(up);  // a single DGX file has no network level to grow with
  EXPECT_NE(up.error().message.find("no network level"), std::string::npos);
  auto grow = scaleCluster(library("dgx-h100-x64"), 16384);
  ASSERT_TRUE(grow);
  EXPECT_EQ(grow->nodes, 2048);
  auto ragged = scaleCluster(c, 12);
  ASSERT_FALSE(ragged);
  EXPECT_NE(ragged.error().message.find("not a whole number of nodes"), std::string::npos);
  EXPECT_FALSE(scaleCluster(c, 3));
  EXPECT_FALSE(scaleCluster(c, 0));
  auto huge = scaleCluster(c, 1000000000);  // a whole number of nodes, but past what colo plans for
  ASSERT_FALSE(huge);
  EXPECT_NE(huge.error().message.find("--gpus 1000000000 is more than"), std::string::npos) << huge.error().message;
}

TEST(Cluster, ARackScaleNvlinkDomainIsSizedToTheJob) {
  // GB200/GB300 NVL72 racks hand out compute trays: 64 GPUs run in one NVLink domain of 64, 128 in two
  // of 64, 144 in two whole racks; a count that divides the rack is one partial rack, as on any node.
  for (const char* name : {"gb200-nvl72-x8", "gb300-nvl72-x8"}) {
    const ClusterSpec rack = library(name);
    for (const auto& [gpus, nodes, perNode] : std::vector<std::tuple<int, int, int>>{{64, 1, 64}, {128, 2, 64}, {144, 2, 72}, {8, 1, 8}, {256, 4, 64}}) {
      auto s = scaleCluster(rack, gpus);
      ASSERT_TRUE(s) << name << " " << gpus << ": " << s.error().toString();
      EXPECT_EQ(s->nodes, nodes) << name << " " << gpus;
      EXPECT_EQ(s->gpusPerNode, perNode) << name << " " << gpus;
      EXPECT_EQ(s->links.front().spanGpus, perNode) << name << " " << gpus;
      EXPECT_EQ(s->links.back().spanGpus, gpus) << name << " " << gpus;
      EXPECT_EQ(s->links.size(), nodes > 1 ? 2u : 1u) << name << " " << gpus;
    }
    // A rack's domains are handed out by hosts (compute trays of 4), in equal domains of at least half a
    // rack: 97 or 146 GPUs make none, and the error names counts that do.
    for (const auto& [gpus, suggestion] : std::vector<std::pair<int, const char*>>{{97, "try --gpus 96 or 104"}, {146, "try --gpus 144 or 156"}, {18, "try --gpus 16 or 20"}}) {
      auto refused = scaleCluster(rack, gpus);
      ASSERT_FALSE(refused) << name << " " << gpus;
      EXPECT_NE(refused.error().message.find(suggestion), std::string::npos) << refused.error().message;
    }
    EXPECT_EQ(scaleCluster(rack, 2)->gpusPerHost, 0);  // part of one tray
    EXPECT_EQ(scaleCluster(rack, 128)->hostGpus(), 4);
    // One rack file alone has no network to join two domains with.
    EXPECT_FALSE(scaleCluster(library(std::string(name).substr(0, std::string(name).size() - 3)), 128));
  }
  // An 8-GPU node is still taken in whole nodes.
  EXPECT_FALSE(scaleCluster(library("dgx-b300-x64"), 12));
}

struct BadClusterCase {
  const char* patch;
  const char* path;
  const char* fragment;
};

class BadCluster : public ::testing::TestWithParam<BadClusterCase> {};

TEST_P(BadCluster, IsRejectedWithPathAndValue) {
  Json doc = test::loadJson(test::dataFile("clusters/dgx-a100-80gb-x16.json"));
  Json patch = Json::parse(GetParam().patch);
  if (patch.contains("links")) {
    doc["links"] = patch["links"];
    patch.erase("links");
  }
  doc.merge_patch(patch);
  auto r = clusterFromJson(doc, "c.json");
  ASSERT_FALSE(r) << GetParam().patch;
  EXPECT_EQ(r.error().path, GetParam().path) << r.error().toString();
  EXPECT_NE(r.error().message.find(GetParam().fragment), std::string::npos) << r.error().toString();
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadCluster,
    ::testing::Values(
        BadClusterCase{R"({"nodes": 0})", "/nodes", "positive"},
        BadClusterCase{R"({"gpu": {"memory_GiB": -80}})", "/gpu/memory_GiB", "must be positive, got -80"},
        BadClusterCase{R"({"gpu": {"peak_TFLOPs": {"bf17": 3}}})", "/gpu/peak_TFLOPs/bf17", "unknown precision"},
        BadClusterCase{R"({"gpu": {"hbm_bandwidth_gbps": 3}})", "/gpu/hbm_bandwidth_gbps", "did you mean"},
        BadClusterCase{R"({"links": [{"name": "nvlink", "kind": "nvswitch", "span_gpus": 8, "bandwidth_GBps": 300, "latency_us": 2}]})",
                       "/links/0/span_gpus", "a multi-node cluster needs a network level"},
        BadClusterCase{R"({"links": [{"name": "nvlink", "kind": "nvswitch", "span_gpus": 16, "bandwidth_GBps": 300, "latency_us": 2},
                                     {"name": "ib", "kind": "infiniband", "bandwidth_GBps": 25, "latency_us": 5}]})",
                       "/links/0/kind", "cannot join GPUs of different nodes"},
        BadClusterCase{R"({"links": [{"name": "nvlink", "kind": "nvswitch", "span_gpus": 8, "bandwidth_GBps": 300, "latency_us": 2},
                                     {"name": "ib", "kind": "infiniband", "bandwidth_GBps": 400, "latency_us": 5}]})",
                       "/links/1/bandwidth_GBps", "check the units"},
        BadClusterCase{R"({"links": [{"name": "nvlink", "kind": "nvswitch", "span_gpus": 3, "bandwidth_GBps": 300, "latency_us": 2},
                                     {"name": "ib", "kind": "infiniband", "bandwidth_GBps": 25, "latency_us": 5}]})",
                       "/links/0/span_gpus", "must divide gpus_per_node"},
        BadClusterCase{R"({"links": [{"name": "ib", "kind": "token_ring", "bandwidth_GBps": 25, "latency_us": 5}]})",
                       "/links/0/kind", "unknown value \"token_ring\""},
        BadClusterCase{R"({"links": []})", "/links", "at least one link level"},
        BadClusterCase{R"({"pcie_bandwidth_GBps": "fast"})", "/pcie_bandwidth_GBps", "must be a number"},
        BadClusterCase{R"({"links": [{"name": "nvlink", "kind": "nvswitch", "span_gpus": 8, "bandwidth_GBps": 300, "latency_us": 2, "efficiency": 78},
                                     {"name": "ib", "kind": "infiniband", "bandwidth_GBps": 25, "latency_us": 5}]})",
                       "/links/0/efficiency", "share of the bandwidth in (0, 1], got 78"},
        BadClusterCase{R"({"links": [{"name": "nvlink", "kind": "nvswitch", "span_gpus": 8, "bandwidth_GBps": 300, "latency_us": 2},
                                     {"name": "ib", "kind": "infiniband", "bandwidth_GBps": 25, "latency_us": 5, "launch_us": -3}]})",
                       "/links/1/launch_us", "negative"},
        BadClusterCase{R"({"links": [{"name": "nvlink", "kind": "nvswitch", "span_gpus": 8, "bandwidth_GBps": 300, "latency_us": 2,
                                      "collectives": {"broadcast": {"efficiency": 0.7, "latency_us": 5, "launch_us": 20}}},
                                     {"name": "ib", "kind": "infiniband", "bandwidth_GBps": 25, "latency_us": 5}]})",
                       "/links/0/collectives/broadcast", "unknown collective"},
        BadClusterCase{R"({"links": [{"name": "nvlink", "kind": "nvswitch", "span_gpus": 8, "bandwidth_GBps": 300, "latency_us": 2,
                                      "collectives": {"all_gathr": {"efficiency": 0.7}}},
                                     {"name": "ib", "kind": "infiniband", "bandwidth_GBps": 25, "latency_us": 5}]})",
                       "/links/0/collectives/all_gathr", "unknown collective"},  // named before its body's gaps
        BadClusterCase{R"({"links": [{"name": "nvlink", "kind": "nvswitch", "span_gpus": 8, "bandwidth_GBps": 300, "latency_us": 2,
                                      "collectives": {"all_gather": {"efficiency": 67, "latency_us": 5, "launch_us": 20}}},
                                     {"name": "ib", "kind": "infiniband", "bandwidth_GBps": 25, "latency_us": 5}]})",
                       "/links/0/collectives/all_gather/efficiency", "share of the bandwidth in (0, 1], got 67"},
        BadClusterCase{R"({"links": [{"name": "nvlink", "kind": "nvswitch", "span_gpus": 8, "bandwidth_GBps": 300, "latency_us": 2,
                                      "collectives": {"all_gather": {"efficiency": 0.67, "launch_us": 20}}},
                                     {"name": "ib", "kind": "infiniband", "bandwidth_GBps": 25, "latency_us": 5}]})",
                       "/links/0/collectives/all_gather/latency_us", "missing"}));

TEST(Cluster, MeasuredCollectiveFiguresAreOptionalAndRoundTrip) {
  const ClusterSpec a100 = library("dgx-a100-80gb");
  EXPECT_EQ(a100.links[0].efficiency, 0.0);  // not measured: the link kind's default applies
  EXPECT_EQ(a100.links[0].launchSeconds, 0.0);
  EXPECT_FALSE(clusterToJson(a100)["links"][0].contains("efficiency"));  // an unmeasured file keeps its hash
  const ClusterSpec b200 = library("dgx-b200");
  EXPECT_DOUBLE_EQ(b200.links[0].efficiency, 0.7);
  EXPECT_NEAR(b200.links[0].launchSeconds, 23.6e-6, 1e-15);
  ASSERT_NE(b200.links[0].fitFor("all_gather"), nullptr);
  EXPECT_DOUBLE_EQ(b200.links[0].fitFor("all_gather")->efficiency, 0.674);
  EXPECT_NEAR(b200.links[0].fitFor("reduce_scatter")->launchSeconds, 25.6e-6, 1e-15);
  EXPECT_EQ(b200.links[0].collectives.size(), 4u);
  EXPECT_TRUE(a100.links[0].collectives.empty());
  EXPECT_FALSE(clusterToJson(a100)["links"][0].contains("collectives"));
  // A cluster built in code is held to the same rules as a file.
  ClusterSpec twice = b200;
  twice.links[0].collectives.push_back(twice.links[0].collectives.front());
  const auto duplicate = validateCluster(twice, "code");
  ASSERT_FALSE(duplicate);
  EXPECT_NE(duplicate.error().toString().find("/collectives/all_reduce"), std::string::npos) << duplicate.error().toString();
  ClusterSpec negative = b200;
  negative.links[0].collectives[1].launchSeconds = -1e-6;
  EXPECT_FALSE(validateCluster(negative, "code"));
  auto back = clusterFromJson(clusterToJson(b200), "rt.json");
  ASSERT_TRUE(back) << back.error().toString();
  EXPECT_EQ(*back, b200);
}

TEST(Cluster, PrecisionNames) {
  EXPECT_EQ(*parseDType("bf16"), DType::kBf16);
  EXPECT_EQ(bytesPerElement(DType::kFp8), 1);
  EXPECT_FALSE(parseDType("int4"));
}

}  // namespace
}  // namespace colo
