// Cost databases (colo-plan --costdb FILE): open read-only, read every table, time a plan with it.
#include "colo/costmodel/cost_db.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto file = colo::fuzz::scratch() / "costs.sqlite";
  colo::fuzz::writeFile(file, data, size);
  {
    auto db = colo::costmodel::CostDatabase::open(file.string());
    if (!db) {
      colo::fuzz::requireNamedUserError(db.error(), file.string());
    } else {
      for (const auto& device : db->devices()) {
        (void)db->kernelsFor(device);
        (void)db->collectivesFor(device);
        (void)db->copiesFor(device);
      }
      const auto gemms = db->gemmsFor("");
      const colo::costmodel::GemmTable table(gemms, colo::DType::kBf16);
      (void)table.lookup(1024, 1024, 1024, [](double m, double n, double k) { return 2 * m * n * k / 1e14; });
      (void)db->hash();
    }
  }
  colo::fuzz::requireNothingBeside(file);
  return 0;
}
