// colo-validate's inputs: the input is a public_runs.json (an array of published runs) read with the
// repository's assumptions.json, or, when it is a colo.validation-assumptions document, an
// assumptions.json read with the repository's runs. Every case that loads is evaluated.
#include "fuzz_support.h"
#include "validation_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto dir = colo::fuzz::scratch();
  const std::string input = colo::fuzz::text(data, size);
  const bool assumptions = input.find("colo.validation-assumptions") != std::string::npos;
  const std::string shipped = std::string(COLO_SOURCE_DIR) + "/data/validation/";
  std::filesystem::copy_file(shipped + (assumptions ? "public_runs.json" : "assumptions.json"),
                             dir / (assumptions ? "public_runs.json" : "assumptions.json"));
  const auto file = dir / (assumptions ? "assumptions.json" : "public_runs.json");
  colo::fuzz::writeFile(file, data, size);
  std::vector<colo::validation::Skipped> skipped;
  auto cases = colo::validation::loadCases(dir.string(), &skipped);
  if (!cases) {
    colo::fuzz::requireNamedUserError(cases.error(), file.string());
    return 0;
  }
  for (const auto& s : skipped) {
    if (s.reason.find(file.string()) == std::string::npos) {
      std::fprintf(stderr, "fuzz: skipped row without its file: %s\n", s.reason.c_str());
      std::abort();
    }
  }
  for (const auto& c : *cases) (void)colo::validation::evaluateCase(c);
  return 0;
}
