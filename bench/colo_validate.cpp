// colo-validate: predicted against measured for the published runs in data/validation, as a table,
// with the error per source and overall. Usage: colo-validate [DATA_DIR]
#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>

#include "colo/core/library.h"
#include "colo/core/units.h"
#include "text_table.h"
#include "validation_harness.h"

int main(int argc, char** argv) {
  const std::string folder = argc > 1 ? argv[1] : colo::dataDirectory() + "/validation";
  auto cases = colo::validation::loadCases(folder);
  if (!cases) {
    std::cerr << "colo-validate: error: " << cases.error().toString() << "\n";
    return 2;
  }
  colo::app::TextTable table({"run", "measured", "predicted", "error", "memory meas.", "memory pred.", "error"},
                             {false, true, true, true, true, true, true});
  std::vector<double> errors;
  std::vector<double> fullErrors;
  std::vector<double> memoryErrors;
  std::map<std::string, std::vector<double>> bySource;
  for (const auto& c : *cases) {
    auto o = colo::validation::evaluateCase(c);
    if (!o) {
      std::cerr << "colo-validate: " << c.id << ": " << o.error().toString() << "\n";
      return 1;
    }
    const double e = std::fabs(o->stepError);
    errors.push_back(e);
    if (c.fullyPublished) fullErrors.push_back(e);
    bySource[c.id.substr(0, c.id.find('_'))].push_back(e);
    std::string memMeasured = "-", memPredicted = "-", memError = "-";
    if (o->memoryError) {
      memMeasured = colo::formatBytes(*c.measuredMemoryBytes);
      memPredicted = colo::formatBytes(*o->predictedMemoryBytes);
      memError = colo::formatFixed(100 * *o->memoryError, 1) + "%";
      memoryErrors.push_back(std::fabs(*o->memoryError));
    }
    table.addRow({c.id + (c.fullyPublished ? "" : " *"), colo::formatFixed(o->measuredSeconds, 4) + " s",
                  colo::formatFixed(o->predictedStepSeconds, 4) + " s", colo::formatFixed(100 * o->stepError, 1) + "%",
                  memMeasured, memPredicted, memError});
  }
  std::cout << table.render();
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (const double x : v) s += x;
    return v.empty() ? 0.0 : s / static_cast<double>(v.size());
  };
  std::cout << "\n* configuration partly assumed (data/validation/assumptions.json)\n\n";
  std::cout << "step time |error|: median " << colo::formatFixed(100 * median(errors), 1) << "%, mean "
            << colo::formatFixed(100 * mean(errors), 1) << "% over " << errors.size() << " runs; median "
            << colo::formatFixed(100 * median(fullErrors), 1) << "% over the " << fullErrors.size()
            << " fully published\n";
  for (const auto& [source, v] : bySource) {
    std::cout << "  " << source << ": median " << colo::formatFixed(100 * median(v), 1) << "%, mean "
              << colo::formatFixed(100 * mean(v), 1) << "% (" << v.size() << ")\n";
  }
  if (!memoryErrors.empty()) {
    std::cout << "memory |error|: mean " << colo::formatFixed(100 * mean(memoryErrors), 1) << "% over "
              << memoryErrors.size() << " runs\n";
  }
  return 0;
}
