// colo-validate's inputs: the input is a public_runs.json (an array of published runs) read with the
// repository's assumptions.json, or, when it is a colo.validation-assumptions document, an
// assumptions.json read with the repository's runs; the same bytes are also read as a CSV of a user's
// jobs (colo-validate RUNS.csv, colo-profile calibrate), and as a kernel table (DATA_DIR/kernels/*.json).
// Every case that loads is evaluated, every table that loads checked.
#include "fuzz_support.h"
#include "validation_harness.h"
#include "validation_kernels.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto dir = colo::fuzz::scratch();
  const std::string input = colo::fuzz::text(data, size);
  const bool assumptions = input.find("colo.validation-assumptions") != std::string::npos;
  // The shipped files are read once: copying them on every input made copy_file fail with EINTR when
  // libFuzzer's timer signal arrived, a finding of this harness rather than of colo.
  static const auto readShipped = [](const char* name) {
    std::ifstream in(std::string(COLO_SOURCE_DIR) + "/data/validation/" + name, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  static const std::string shippedRuns = readShipped("public_runs.json");
  static const std::string shippedAssumptions = readShipped("assumptions.json");
  const std::string& other = assumptions ? shippedRuns : shippedAssumptions;
  colo::fuzz::writeFile(dir / (assumptions ? "public_runs.json" : "assumptions.json"),
                        reinterpret_cast<const std::uint8_t*>(other.data()), other.size());
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
  const auto csv = dir / "runs.csv";
  colo::fuzz::writeFile(csv, data, size);
  auto jobs = colo::validation::loadRuns(csv.string(), &skipped);
  if (!jobs) {
    colo::fuzz::requireNamedUserError(jobs.error(), csv.string());
    return 0;
  }
  for (const auto& c : *jobs) (void)colo::validation::observationOf(c);
  const auto table = dir / "kernel_table.json";
  colo::fuzz::writeFile(table, data, size);
  auto bench = colo::validation::loadKernelBenchmark(table.string());
  if (!bench) {
    colo::fuzz::requireNamedUserError(bench.error(), table.string());
    return 0;
  }
  if (auto check = colo::validation::checkKernelBenchmark(*bench); !check) colo::fuzz::requireNamedUserError(check.error(), table.string());
  return 0;
}
