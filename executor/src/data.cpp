#include "colo/executor/data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace colo::executor {
namespace {

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

struct Mapping {
  void* address = nullptr;
  std::size_t length = 0;
  ~Mapping() {
    if (address && address != MAP_FAILED) munmap(address, length);
  }
};

Result<std::unique_ptr<Mapping>> mapFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return fail(Error::io(std::string("cannot open: ") + std::strerror(errno), path));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return fail(Error::io("cannot stat", path));
  }
  auto m = std::make_unique<Mapping>();
  m->length = static_cast<std::size_t>(st.st_size);
  if (m->length > 0) {
    m->address = mmap(nullptr, m->length, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m->address == MAP_FAILED) {
      ::close(fd);
      m->address = nullptr;
      return fail(Error::io(std::string("cannot map: ") + std::strerror(errno), path));
    }
  }
  ::close(fd);
  return m;
}

// Megatron's indexed dataset element types (megatron/core/datasets/indexed_dataset.py).
int megatronTypeBytes(std::uint8_t code, bool& isUnsigned) {
  isUnsigned = code == 1 || code == 8;
  switch (code) {
    case 1: case 2: return 1;   // uint8, int8
    case 3: case 8: return 2;   // int16, uint16
    case 4: return 4;           // int32
    case 5: return 8;           // int64
    default: return 0;          // float types are not token ids
  }
}

}  // namespace

struct TokenData::Impl {
  std::string path;
  std::unique_ptr<Mapping> map;
  const unsigned char* base = nullptr;
  std::int64_t count = 0;
  int bytes = 2;
  mutable std::int64_t maxToken = -1;
};

TokenData::TokenData(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
TokenData::TokenData(TokenData&&) noexcept = default;
TokenData& TokenData::operator=(TokenData&&) noexcept = default;
TokenData::~TokenData() = default;

Result<TokenData> TokenData::open(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return fail(Error::io("no such token file", path));
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  if (endsWith(path, ".u16")) {
    impl->bytes = 2;
  } else if (endsWith(path, ".u32")) {
    impl->bytes = 4;
  } else if (endsWith(path, ".bin")) {
    const std::string idx = path.substr(0, path.size() - 4) + ".idx";
    std::ifstream in(idx, std::ios::binary);
    if (!in) return fail(Error::io("a Megatron .bin needs its index next to it", idx));
    char magic[9] = {};
    std::uint64_t version = 0;
    std::uint8_t code = 0;
    in.read(magic, 9);
    in.read(reinterpret_cast<char*>(&version), 8);
    in.read(reinterpret_cast<char*>(&code), 1);
    if (!in || std::memcmp(magic, "MMIDIDX\x00\x00", 9) != 0) {
      return fail(Error::badInput("not a Megatron indexed-dataset index (magic MMIDIDX)", idx));
    }
    if (version != 1) return fail(Error::badInput("index version " + std::to_string(version) + " (expected 1)", idx));
    bool isUnsigned = false;
    impl->bytes = megatronTypeBytes(code, isUnsigned);
    if (impl->bytes == 0) {
      return fail(Error::badInput("dtype code " + std::to_string(code) + " is not an integer token type", idx));
    }
  } else {
    return fail(Error::badInput("unknown token file type: expected .u16, .u32 (flat little-endian tokens) or a Megatron "
                                ".bin with its .idx (make one with colo-run prepare)",
                                path));
  }
  auto map = mapFile(path);
  if (!map) return fail(map.error());
  impl->map = std::move(*map);
  if (impl->map->length % static_cast<std::size_t>(impl->bytes) != 0) {
    return fail(Error::badInput(std::to_string(impl->map->length) + " bytes is not a whole number of " +
                                    std::to_string(impl->bytes) + "-byte tokens",
                                path));
  }
  impl->base = static_cast<const unsigned char*>(impl->map->address);
  impl->count = static_cast<std::int64_t>(impl->map->length) / impl->bytes;
  if (impl->count < 2) return fail(Error::badInput("the file holds " + std::to_string(impl->count) + " tokens", path));
  return TokenData(std::move(impl));
}

std::int64_t TokenData::size() const { return m_impl->count; }
int TokenData::tokenBytes() const { return m_impl->bytes; }
const std::string& TokenData::path() const { return m_impl->path; }

std::uint64_t TokenData::token(std::int64_t index) const {
  const unsigned char* p = m_impl->base + index * m_impl->bytes;
  std::uint64_t v = 0;
  for (int b = m_impl->bytes - 1; b >= 0; --b) v = (v << 8) | p[b];  // little-endian
  return v;
}

std::uint64_t TokenData::maxToken() const {
  if (m_impl->maxToken < 0) {
    std::uint64_t best = 0;
    for (std::int64_t i = 0; i < m_impl->count; ++i) best = std::max(best, token(i));
    m_impl->maxToken = static_cast<std::int64_t>(best);
  }
  return static_cast<std::uint64_t>(m_impl->maxToken);
}

std::int64_t TokenData::sampleStart(std::uint64_t seed, std::int64_t step, std::int64_t sampleIndex,
                                    std::int64_t seqLen) const {
  const std::int64_t room = m_impl->count - seqLen - 1;
  if (room <= 0) return 0;
  const std::uint64_t h = splitmix(splitmix(splitmix(seed) ^ static_cast<std::uint64_t>(step)) ^
                                   static_cast<std::uint64_t>(sampleIndex));
  return static_cast<std::int64_t>(h % static_cast<std::uint64_t>(room + 1));
}

std::vector<std::int64_t> TokenData::sample(std::uint64_t seed, std::int64_t step, std::int64_t sampleIndex,
                                            std::int64_t seqLen) const {
  const std::int64_t start = sampleStart(seed, step, sampleIndex, seqLen);
  std::vector<std::int64_t> out(static_cast<std::size_t>(seqLen + 1));
  for (std::int64_t i = 0; i <= seqLen; ++i) {
    // A file shorter than a sample wraps around (tiny demo corpora).
    out[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(token((start + i) % m_impl->count));
  }
  return out;
}

Result<PrepareReport> prepareTokens(const std::string& textFile, const std::string& outFile) {
  if (!endsWith(outFile, ".u16")) return fail(Error::badInput("the token file must end in .u16", outFile));
  std::error_code ec;
  if (std::filesystem::is_directory(textFile, ec)) return fail(Error::badInput("is a directory, not a text file", textFile));
  std::ifstream in(textFile, std::ios::binary);
  if (!in) return fail(Error::io("cannot read", textFile));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.size() < 2) return fail(Error::badInput("the text has fewer than two bytes", textFile));
  std::vector<std::uint16_t> tokens(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  const std::string tmp = outFile + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return fail(Error::io("cannot write", tmp));
    for (const auto t : tokens) {
      const unsigned char le[2] = {static_cast<unsigned char>(t & 0xff), static_cast<unsigned char>(t >> 8)};
      out.write(reinterpret_cast<const char*>(le), 2);
    }
    if (!out) return fail(Error::io("cannot write", tmp));
  }
  std::filesystem::rename(tmp, outFile, ec);
  if (ec) return fail(Error::io("cannot rename into place: " + ec.message(), outFile));
  return PrepareReport{static_cast<std::int64_t>(tokens.size()), 256};
}

}  // namespace colo::executor
