// Token files (colo-run --data FILE): the first input byte picks .u16, .u32 or a Megatron .bin whose
// .idx is the rest of the input's first 32 bytes; then samples are drawn.
#include "colo/executor/data.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const auto dir = colo::fuzz::scratch();
  const int kind = data[0] % 3;
  ++data;
  --size;
  std::filesystem::path file = dir / (kind == 0 ? "tokens.u16" : kind == 1 ? "tokens.u32" : "tokens.bin");
  if (kind == 2) {
    const std::size_t index = std::min<std::size_t>(size, 32);
    colo::fuzz::writeFile(dir / "tokens.idx", data, index);
    data += index;
    size -= index;
  }
  colo::fuzz::writeFile(file, data, size);
  auto tokens = colo::executor::TokenData::open(file.string());
  if (!tokens) {
    const std::string named = tokens.error().file;
    colo::fuzz::requireNamedUserError(tokens.error(), named.empty() ? file.string() : named);
    return 0;
  }
  (void)tokens->maxToken();
  for (std::int64_t step = 0; step < 3; ++step) (void)tokens->sample(7, step, step, 16);
  return 0;
}
