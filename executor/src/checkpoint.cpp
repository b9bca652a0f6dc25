// Checkpoint shards: written atomically (temporary name, rename), read back under any plan of the model.
#include "checkpoint.h"

#include <filesystem>
#include <fstream>

#include "colo/core/json.h"
#include "colo/executor/executor.h"

namespace colo::executor {
namespace detail {

using torch::Tensor;

std::string stepDir(std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return name;
}

Result<void> writeShard(const std::string& dir, int rank, const Plan& plan, std::int64_t step, const std::vector<ShardPart>& parts) {
  Json params = Json::array();
  const std::string base = dir + "/rank-" + std::to_string(rank);
  const std::string blobTmp = base + ".bin.tmp";
  {
    std::ofstream out(blobTmp, std::ios::binary | std::ios::trunc);
    if (!out) return fail(Error::io("cannot write", blobTmp));
    std::int64_t at = 0;
    for (const auto& part : parts) {
     for (const auto& s : *part.slots) {
      for (const Tensor* t : {&part.master, &part.m, &part.v}) {
        Tensor values = t->narrow(0, s.offset, s.numel).to(torch::kCPU, torch::kFloat32).contiguous();
        out.write(reinterpret_cast<const char*>(values.data_ptr<float>()), static_cast<std::streamsize>(s.numel * 4));
      }
      params.push_back({{"name", s.param->name},
                        {"full_shape", s.param->fullShape},
                        {"shard_dim", s.param->shardDim},
                        {"shard_index", s.param->shardIndex},
                        {"shard_count", s.param->shardCount},
                        {"offset", at},
                        {"numel", s.numel}});
      at += 3 * s.numel;
     }
    }
    out.flush();
    if (!out) return fail(Error::io("cannot write", blobTmp));
  }
  std::error_code ec;
  std::filesystem::rename(blobTmp, base + ".bin", ec);
  if (ec) return fail(Error::io("cannot rename: " + ec.message(), base + ".bin"));
  const Json manifest{{"format", "colo.checkpoint-shard/1"}, {"step", step},
                      {"plan_hash", contentHash(planToJson(plan))}, {"model", plan.model.name()},
                      {"params", params}};
  return writeJsonFileAtomic(base + ".json", manifest);
}

Result<std::map<std::string, std::vector<Piece>>> readPieces(const std::string& dir, std::int64_t& step, std::string& model) {
  std::map<std::string, std::vector<Piece>> pieces;
  std::error_code ec;
  bool any = false;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string path = entry.path().string();
    if (entry.path().extension() != ".json") continue;
    auto j = readJsonFile(path);
    if (!j) return fail(j.error());
    if (j->value("format", "") != "colo.checkpoint-shard/1") return fail(Error::badInput("not a colo checkpoint shard", path));
    step = (*j)["step"].get<std::int64_t>();
    model = (*j)["model"].get<std::string>();
    const std::string blob = path.substr(0, path.size() - 5) + ".bin";
    for (const auto& p : (*j)["params"]) {
      pieces[p["name"].get<std::string>()].push_back({blob, p["offset"].get<std::int64_t>(), p["numel"].get<std::int64_t>(),
                                                      p["shard_dim"].get<int>(), p["shard_index"].get<int>(),
                                                      p["shard_count"].get<int>(), p["full_shape"].get<std::vector<std::int64_t>>()});
    }
    any = true;
  }
  if (ec) return fail(Error::io("cannot list: " + ec.message(), dir));
  if (!any) return fail(Error::badInput("no checkpoint shards (rank-*.json)", dir));
  return pieces;
}

// Reads (weights, m, v) of the full tensor `name` from its pieces, whatever tensor-parallel split they
// were saved under, and returns this rank's shard of each.
Result<std::array<Tensor, 3>> loadParam(const Param& prm, const std::vector<Piece>& all, const std::string& dir) {
  // Pieces of one complete split (the first split seen; a tied copy may repeat pieces).
  std::map<int, const Piece*> byIndex;
  const int count = all.front().shardCount;
  for (const auto& p : all) {
    if (p.shardCount == count) byIndex.emplace(p.shardIndex, &p);
  }
  if (static_cast<int>(byIndex.size()) != count) {
    return fail(Error::badInput("checkpoint lacks shards of " + prm.name + " (" + std::to_string(byIndex.size()) + " of " +
                                    std::to_string(count) + ")",
                                dir));
  }
  if (all.front().fullShape != prm.fullShape) {
    return fail(Error::badInput("checkpoint shape of " + prm.name + " differs from the model's (another model?)", dir));
  }
  std::array<std::vector<Tensor>, 3> parts;
  std::vector<std::int64_t> shape = prm.fullShape;
  const int dim = all.front().shardDim;
  if (dim >= 0) shape[static_cast<std::size_t>(dim)] /= count;
  for (const auto& [index, piece] : byIndex) {
    std::ifstream in(piece->blob, std::ios::binary);
    if (!in) return fail(Error::io("cannot read", piece->blob));
    in.seekg(piece->offset * 4);
    for (int k = 0; k < 3; ++k) {
      Tensor t = torch::empty({piece->numel}, torch::kFloat32);
      in.read(reinterpret_cast<char*>(t.data_ptr<float>()), static_cast<std::streamsize>(piece->numel * 4));
      if (!in) return fail(Error::badInput("truncated checkpoint blob", piece->blob));
      parts[static_cast<std::size_t>(k)].push_back(t.view(shape));
    }
  }
  std::array<Tensor, 3> out;
  for (int k = 0; k < 3; ++k) {
    Tensor full = dim >= 0 ? torch::cat(parts[static_cast<std::size_t>(k)], dim) : parts[static_cast<std::size_t>(k)][0];
    if (prm.shardDim >= 0) {
      const std::int64_t part = prm.fullShape[static_cast<std::size_t>(prm.shardDim)] / prm.shardCount;
      full = full.narrow(prm.shardDim, prm.shardIndex * part, part);
    }
    out[static_cast<std::size_t>(k)] = full.contiguous().view({-1});
  }
  return out;
}

// Weights and optimizer moments of every parameter, re-sharded from whatever plan wrote them; returns
// the checkpoint's step.
Result<std::int64_t> resumeStates(const RunOptions& o, const ModelSpec& spec, States& states, std::string& dir) {
  auto newest = latestCheckpoint(o.checkpointDir);
  if (!newest) return fail(newest.error());
  dir = *newest;
  std::int64_t savedStep = 0;
  std::string savedModel;
  auto pieces = readPieces(dir, savedStep, savedModel);
  if (!pieces) return fail(pieces.error());
  if (savedModel != spec.name) return fail(Error::badInput("checkpoint of model " + savedModel + ", the plan trains " + spec.name, dir));
  for (auto& state : states) {
    const std::int64_t n = state->flatSize();
    Tensor master = torch::zeros({n}, torch::kFloat32), m = torch::zeros({n}, torch::kFloat32), v = torch::zeros({n}, torch::kFloat32);
    for (const auto& s : state->slots()) {
      auto it = pieces->find(s.param->name);
      if (it == pieces->end()) return fail(Error::badInput("checkpoint has no parameter " + s.param->name, dir));
      auto loaded = loadParam(*s.param, it->second, dir);
      if (!loaded) return fail(loaded.error());
      master.narrow(0, s.offset, s.numel).copy_((*loaded)[0]);
      m.narrow(0, s.offset, s.numel).copy_((*loaded)[1]);
      v.narrow(0, s.offset, s.numel).copy_((*loaded)[2]);
    }
    state->load(master, m, v);
  }
  if (savedStep >= o.steps) {
    return fail(Error::badInput("the checkpoint is at step " + std::to_string(savedStep) + ", --steps is " + std::to_string(o.steps) +
                                ": nothing left to run"));
  }
  return savedStep;
}

// Each parameter once: rank 0 of its data-parallel group writes it (the routed experts' group is
// another); then `latest` once every shard is down.
Result<void> writeCheckpoint(const RunOptions& o, const Plan& plan, Groups& g, int rank, std::int64_t step, States& states,
                        std::string& lastCheckpoint) {
  const std::string dir = o.checkpointDir + "/" + stepDir(step);
  std::vector<ShardPart> parts;
  for (auto& state : states) {
    auto full = state->gatherFull();
    const bool writer = (state->experts() ? g.expertDp : g.dpCp)->rank() == 0;
    if (writer) parts.push_back({&state->slots(), full[0], full[1], full[2]});
  }
  if (!parts.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return fail(Error::io("cannot create: " + ec.message(), dir));
    if (auto wrote = writeShard(dir, rank, plan, step, parts); !wrote) return fail(wrote.error());
  }
  g.world->barrier();
  if (rank == 0) {
    const std::string tmp = o.checkpointDir + "/latest.tmp";
    {
      std::ofstream latest(tmp, std::ios::trunc);
      latest << stepDir(step) << "\n";
    }
    std::error_code ec;
    std::filesystem::rename(tmp, o.checkpointDir + "/latest", ec);
    if (ec) return fail(Error::io("cannot rename: " + ec.message(), o.checkpointDir + "/latest"));
  }
  g.world->barrier();
  lastCheckpoint = dir;
  return {};
}

}  // namespace detail

Result<std::string> latestCheckpoint(const std::string& checkpointDir) {
  if (checkpointDir.empty()) return fail(Error::badInput("--resume needs --checkpoint-dir"));
  std::ifstream latestFile(checkpointDir + "/latest");
  std::string latest;
  if (!(latestFile >> latest)) {
    return fail(Error::badInput("no checkpoint to resume from: no 'latest' file; an earlier run with --checkpoint-dir " +
                                    checkpointDir + " writes one",
                                checkpointDir));
  }
  return checkpointDir + "/" + latest;
}

}  // namespace colo::executor
