// Runs databases (colo-run runs --db FILE): open, list every run, leave nothing beside the file.
#include "colo/executor/runs_db.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto file = colo::fuzz::scratch() / "runs.sqlite";
  colo::fuzz::writeFile(file, data, size);
  {
    auto db = colo::executor::RunsDatabase::open(file.string());
    if (!db) {
      colo::fuzz::requireNamedUserError(db.error(), file.string());
    } else {
      (void)db->runs();
    }
  }
  colo::fuzz::requireNothingBeside(file);
  return 0;
}
