// The user's own jobs as a CSV, read into validation rows (validation_harness.h, rowsFromCsv).
#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "colo/core/limits.h"
#include "validation_harness.h"
#include "validation_rows_detail.h"

namespace colo::validation {
namespace {

std::vector<std::string> splitCsvLine(const std::string& line) {
  std::vector<std::string> cells;
  std::string cell;
  bool quoted = false;
  for (const char ch : line) {
    if (ch == '"') {
      quoted = !quoted;
    } else if (ch == ',' && !quoted) {
      cells.push_back(cell);
      cell.clear();
    } else if (ch != '\r') {
      cell += ch;
    }
  }
  cells.push_back(cell);
  for (auto& c : cells) {
    const auto first = c.find_first_not_of(" \t");
    const auto last = c.find_last_not_of(" \t");
    c = first == std::string::npos ? "" : c.substr(first, last - first + 1);
  }
  return cells;
}

}  // namespace

Result<Json> rowsFromCsv(const std::string& file) {
  std::ifstream in(file);
  if (!in) return fail(Error::io("cannot read", file));
  auto bad = [&](std::size_t line, const std::string& column, const std::string& why) {
    return fail(Error::badInput("line " + std::to_string(line) + (column.empty() ? "" : ", column " + column) + ": " + why, file));
  };
  std::string text;
  std::size_t lineNumber = 0;
  std::vector<std::string> header;
  Json rows = Json::array();
  static const char* kRequired[] = {"model", "gpu", "gpus", "tp", "pp", "dp", "mbs", "gbs", "seq_len", "step_time_s"};
  static const char* kNumeric[] = {"gpus", "tp", "pp", "dp", "cp", "ep", "vpp", "zero", "mbs", "gbs", "seq_len",
                                   "gpus_per_node", "step_time_s", "peak_memory_gib"};
  static const char* kText[] = {"id", "model", "gpu", "framework", "recompute", "precision", "memory_kind"};
  while (std::getline(in, text)) {
    ++lineNumber;
    if (text.size() > static_cast<std::size_t>(limits::kMaxJsonBytes)) return bad(lineNumber, "", "line too long");
    if (text.find_first_not_of(" \t\r") == std::string::npos || text[0] == '#') continue;
    auto cells = splitCsvLine(text);
    if (header.empty()) {
      header = cells;
      for (const char* r : kRequired) {
        if (std::find(header.begin(), header.end(), r) == header.end()) return bad(lineNumber, r, "missing from the header");
      }
      // A misspelled column would be ignored silently (its figures left out of the check).
      for (std::size_t i = 0; i < header.size(); ++i) {
        const auto& c = header[i];
        if (c.empty()) continue;  // a trailing comma, as spreadsheets write: its cells must stay empty
        const bool known = std::find(std::begin(kNumeric), std::end(kNumeric), c) != std::end(kNumeric) ||
                           std::find(std::begin(kText), std::end(kText), c) != std::end(kText);
        if (!known) {
          std::string names;
          for (const char* k : kRequired) names += std::string(names.empty() ? "" : ", ") + k;
          for (const char* k : {"id", "cp", "ep", "vpp", "zero", "gpus_per_node", "framework", "recompute", "precision",
                                "peak_memory_gib", "memory_kind"}) {
            names += std::string(", ") + k;
          }
          return bad(lineNumber, c, "unknown column (the columns: " + names + ")");
        }
        if (std::find(header.begin(), header.begin() + static_cast<std::ptrdiff_t>(i), c) != header.begin() + static_cast<std::ptrdiff_t>(i)) {
          return bad(lineNumber, c, "given twice in the header");
        }
      }
      continue;
    }
    if (cells.size() != header.size()) {
      return bad(lineNumber, "", std::to_string(cells.size()) + " cells for " + std::to_string(header.size()) + " columns");
    }
    if (rows.size() >= 100000) return bad(lineNumber, "", "more than 100,000 jobs");
    std::map<std::string, std::string> v;
    for (std::size_t i = 0; i < header.size(); ++i) {
      if (header[i].empty() && !cells[i].empty()) {
        return bad(lineNumber, "", "cell " + std::to_string(i + 1) + " holds \"" + cells[i] + "\" under a column with no name");
      }
      v[header[i]] = cells[i];
    }
    std::map<std::string, double> n;
    for (const char* key : kNumeric) {
      if (!v.contains(key) || v[key].empty()) continue;
      std::size_t used = 0;
      double x = 0;
      try {
        x = std::stod(v[key], &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != v[key].size() || !(x >= 0 && x <= 1e15)) return bad(lineNumber, key, "expected a number, got \"" + v[key] + "\"");
      n[key] = x;
    }
    for (const char* r : kRequired) {
      if (v[r].empty()) return bad(lineNumber, r, "is empty");
    }
    // The row names its model as the validation rows do: a library model, by name ("Llama 2 7B").
    if (!detail::libraryModelNamed(v["model"])) {
      return bad(lineNumber, "model", "\"" + v["model"] + "\" is not a library model (colo-plan list models)");
    }
    const std::string id = v.contains("id") && !v["id"].empty() ? v["id"] : "line" + std::to_string(lineNumber);
    Json row = {{"id", id},
                {"source", {{"citation", "your runs"}, {"location", file + " line " + std::to_string(lineNumber)}}},
                {"model", {{"name", v["model"]}, {"seq_len", n["seq_len"]}}},
                {"hardware", {{"gpu", v["gpu"]}, {"num_gpus", n["gpus"]}}},
                {"parallel", {{"tp", n["tp"]}, {"pp", n["pp"]}, {"dp", n["dp"]}}},
                {"training", {{"micro_batch_size", n["mbs"]}, {"global_batch_size", n["gbs"]}}},
                {"measured", {{"iteration_time_s", n["step_time_s"]}}}};
    if (n.contains("gpus_per_node")) row["hardware"]["gpus_per_node"] = n["gpus_per_node"];
    if (n.contains("cp")) row["parallel"]["cp"] = n["cp"];
    if (n.contains("ep")) row["parallel"]["ep"] = n["ep"];
    if (n.contains("vpp")) {
      row["parallel"]["virtual_pipeline_stages"] = n["vpp"];
      if (n["vpp"] > 1) row["parallel"]["schedule"] = "interleaved";
    }
    if (n.contains("zero")) row["parallel"]["zero_stage"] = n["zero"];
    if (v.contains("framework")) row["parallel"]["framework"] = v["framework"];
    if (v.contains("recompute") && !v["recompute"].empty()) row["training"]["recompute"] = v["recompute"];
    if (v.contains("precision") && !v["precision"].empty()) row["training"]["precision"] = v["precision"];
    if (n.contains("peak_memory_gib")) {
      const std::string kind = v.contains("memory_kind") ? detail::lower(v["memory_kind"]) : "device";
      if (kind != "device" && kind != "reserved" && kind != "allocated" && !kind.empty()) {
        return bad(lineNumber, "memory_kind", "expected device, reserved or allocated, got \"" + v["memory_kind"] + "\"");
      }
      const std::string key = kind == "allocated" ? "memory_max_allocated_gib"
                              : kind == "reserved" ? "memory_max_reserved_gib"
                                                   : "memory_per_gpu_gib";
      row["measured"][key] = n["peak_memory_gib"];
    }
    rows.push_back(std::move(row));
  }
  if (header.empty()) return fail(Error::badInput("no header line", file));
  if (rows.empty()) return fail(Error::badInput("no job after the header", file));
  return rows;
}

}  // namespace colo::validation
