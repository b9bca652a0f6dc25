#pragma once
/// \file
/// The SQLite cost database of measured kernels, collectives and copies (written by colo-profile) and the
/// lookup the cost model uses before its roofline: an exact shape, else the nearest measured shape
/// scaled by the roofline's ratio between the two shapes, else nothing (the roofline decides).

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "colo/core/cluster.h"
#include "colo/core/error.h"

namespace colo::costmodel {

/// One measured GEMM (forward: an [m, k] x [k, n] product), seconds per call.
struct GemmMeasurement {
  std::int64_t m = 0, n = 0, k = 0;
  DType dtype = DType::kBf16;
  double seconds = 0;           ///< median per call
  double spreadSeconds = 0;     ///< half the inter-quartile range of the repetitions
  std::int64_t repetitions = 1;
};

/// One measured kernel other than a GEMM (norms, activations, attention, optimizer step, ...).
struct KernelMeasurement {
  std::string op;       ///< e.g. "layernorm", "gelu", "sdpa_causal", "adam_step"
  DType dtype = DType::kBf16;
  std::string shape;    ///< e.g. "8192x768"
  std::string impl;     ///< e.g. "aten", "fused", "unfused"
  double seconds = 0;   ///< median per call
  double spreadSeconds = 0;
  std::int64_t repetitions = 1;
};

/// One measured collective.
struct CollectiveMeasurement {
  std::string op;        ///< all_reduce, all_gather, reduce_scatter, broadcast, send_recv
  std::string backend;   ///< gloo, nccl
  std::int64_t world = 2;
  std::string linkLevel; ///< e.g. "loopback", "nvlink", "network"
  std::int64_t bytes = 0;
  double seconds = 0;
  double spreadSeconds = 0;
  std::int64_t repetitions = 1;
};

/// One measured host-device copy (cudaMemcpy through LibTorch), seconds per copy.
struct CopyMeasurement {
  std::string direction;  ///< "h2d" or "d2h"
  bool pinned = true;     ///< page-locked host memory
  std::int64_t bytes = 0;
  double seconds = 0;
  double spreadSeconds = 0;
  std::int64_t repetitions = 1;
};

/// How a lookup was answered (for --explain).
enum class LookupSource { kExact, kInterpolated, kRoofline };

class CostDatabase {
 public:
  /// The schema version this colo writes; it reads this one and every older one.
  /// Version 1: meta, devices, gemms. Version 2 adds kernels and collectives. Version 3 adds copies.
  static constexpr int kSchemaVersion = 3;

  /// Opens a database read-only. Errors: kIo for a missing file; kBadInput naming the file for a file
  /// that is not SQLite, not a colo cost database, or of a newer schema version (it is never modified).
  [[nodiscard]] static Result<CostDatabase> open(const std::string& path);

  /// Creates an empty database (fails if the file exists) with the current schema. Errors: kIo, kBadInput.
  [[nodiscard]] static Result<CostDatabase> create(const std::string& path);

  /// Opens a database to add measurements: creates it when missing, migrates an older schema in one
  /// transaction, and refuses (without writing a byte) a file that is not a colo cost database or is newer.
  [[nodiscard]] static Result<CostDatabase> openForWrite(const std::string& path);

  /// The schema version of the opened file.
  [[nodiscard]] int schemaVersion() const;

  /// The version an older file had before openForWrite migrated it; 0 when nothing was migrated.
  [[nodiscard]] int migratedFrom() const;

  /// Adds a device (with the run's fingerprint: library versions, threads, CUDA device; fingerprintOf) and
  /// its GEMM measurements in one transaction. Errors: kIo on a write failure (the database keeps everything committed before).
  [[nodiscard]] Result<void> addGemms(const std::string& deviceName, const std::vector<GemmMeasurement>& rows,
                                      const std::string& fingerprint = {});
  [[nodiscard]] Result<void> addKernels(const std::string& deviceName, const std::vector<KernelMeasurement>& rows,
                                        const std::string& fingerprint = {});
  [[nodiscard]] Result<void> addCollectives(const std::string& deviceName, const std::vector<CollectiveMeasurement>& rows,
                                            const std::string& fingerprint = {});
  [[nodiscard]] Result<void> addCopies(const std::string& deviceName, const std::vector<CopyMeasurement>& rows,
                                       const std::string& fingerprint = {});

  /// Whether a GEMM of this device (exact name), precision and shape is already measured (for --resume).
  [[nodiscard]] bool hasGemm(const std::string& deviceName, DType dtype, std::int64_t m, std::int64_t n, std::int64_t k) const;
  [[nodiscard]] std::vector<KernelMeasurement> kernelsFor(const std::string& deviceName) const;
  [[nodiscard]] std::vector<CollectiveMeasurement> collectivesFor(const std::string& deviceName) const;
  [[nodiscard]] std::vector<CopyMeasurement> copiesFor(const std::string& deviceName) const;
  [[nodiscard]] std::vector<std::string> devices() const;
  /// Devices whose name matches `gpuName` (case-insensitive substring either way), as gemmsFor matches.
  [[nodiscard]] std::vector<std::string> devicesMatching(const std::string& gpuName) const;

  /// Copies every device and measurement of `other` that this database lacks (rows of the same key are
  /// kept as they are here), in one transaction. Returns the number of rows added.
  [[nodiscard]] Result<std::int64_t> merge(const std::string& otherPath);

  CostDatabase(CostDatabase&&) noexcept;
  CostDatabase& operator=(CostDatabase&&) noexcept;
  ~CostDatabase();

  /// Measured GEMMs of the device whose name matches `gpuName` (case-insensitive substring either way).
  [[nodiscard]] std::vector<GemmMeasurement> gemmsFor(const std::string& gpuName) const;
  /// Measured GEMMs of the device named exactly `deviceName`.
  [[nodiscard]] std::vector<GemmMeasurement> gemmsOfDevice(const std::string& deviceName) const;

  /// The distinct fingerprints of the profiling runs that wrote `deviceName`'s rows, one a line, the most
  /// recently written last (a run with a fingerprint already listed moves it to the end; a merge adds the
  /// other file's after this one's; past 4 KiB the first lines go); empty for an unknown device.
  [[nodiscard]] std::string fingerprintOf(const std::string& deviceName) const;

  /// A short content hash (for plan provenance).
  [[nodiscard]] std::string hash() const;
  [[nodiscard]] const std::string& path() const;

 private:
  struct Impl;
  explicit CostDatabase(std::unique_ptr<Impl> impl);
  bool ensureDevice(const std::string& name, const std::string& fingerprint);
  bool addFingerprint(const std::string& name, const std::string& fingerprint);
  [[nodiscard]] std::optional<std::string> readFingerprint(const std::string& name) const;
  [[nodiscard]] std::vector<GemmMeasurement> gemmsWhere(const std::function<bool(const std::string&)>& device) const;
  std::unique_ptr<Impl> m_impl;
};

/// Whether measurements of `device` (a cost database's device name, e.g. "cuda: NVIDIA H100 80GB HBM3")
/// serve a cluster whose GPU is named `gpu` (e.g. "H100-SXM5-80GB"). Either name inside the other,
/// ignoring case (an empty `gpu` matches every device); else the device's model ("h100", "a100",
/// "4090") is one of the GPU name's words and their memory sizes ("80gb") and form factors (PCIe, SXM)
/// do not differ where both name one.
[[nodiscard]] bool deviceMatchesGpu(const std::string& device, const std::string& gpu);

/// In-memory GEMM times of one device and precision, answering lookups without SQLite on the hot path.
class GemmTable {
 public:
  GemmTable() = default;
  GemmTable(std::vector<GemmMeasurement> rows, DType dtype);
  [[nodiscard]] bool empty() const { return m_rows.empty(); }
  /// Measured time of (m, n, k) x count: exact, or the nearest shape (log distance) scaled by
  /// `roofline(m, n, k) / roofline(nearest)`. Nullopt when the table has no row within a factor of 4 in
  /// every dimension (the roofline is then better than a far extrapolation).
  template <class Roofline>
  [[nodiscard]] std::optional<std::pair<double, LookupSource>> lookup(double m, double n, double k, Roofline&& roofline) const;

 private:
  std::vector<GemmMeasurement> m_rows;
};

template <class Roofline>
std::optional<std::pair<double, LookupSource>> GemmTable::lookup(double m, double n, double k, Roofline&& roofline) const {
  const GemmMeasurement* best = nullptr;
  double bestDistance = 0;
  for (const auto& r : m_rows) {
    const double dm = std::log(m / static_cast<double>(r.m));
    const double dn = std::log(n / static_cast<double>(r.n));
    const double dk = std::log(k / static_cast<double>(r.k));
    const double d = dm * dm + dn * dn + dk * dk;
    if (!best || d < bestDistance) {
      best = &r;
      bestDistance = d;
    }
  }
  if (!best) return std::nullopt;
  if (bestDistance < 1e-18) return std::pair{best->seconds, LookupSource::kExact};
  const double limit = std::log(4.0);
  if (std::fabs(std::log(m / static_cast<double>(best->m))) > limit ||
      std::fabs(std::log(n / static_cast<double>(best->n))) > limit ||
      std::fabs(std::log(k / static_cast<double>(best->k))) > limit) {
    return std::nullopt;
  }
  const double scale = roofline(m, n, k) / roofline(static_cast<double>(best->m), static_cast<double>(best->n),
                                                     static_cast<double>(best->k));
  return std::pair{best->seconds * scale, LookupSource::kInterpolated};
}

/// In-memory non-GEMM kernel times of one device and precision. Keys are "<op>.fwd" and "<op>.bwd"; a
/// measurement's shape is "<elements>x<width>". A lookup takes the nearest measured element count of the
/// same op and width within a factor of 4 and scales its time linearly (these kernels are memory-bound).
class KernelTable {
 public:
  KernelTable() = default;
  KernelTable(const std::vector<KernelMeasurement>& rows, DType dtype);
  [[nodiscard]] bool empty() const { return m_rows.empty(); }
  [[nodiscard]] std::optional<std::pair<double, LookupSource>> lookup(const std::string& key, double elements,
                                                                      std::int64_t width) const;
  /// For streaming kernels whose time is linear in size at any size (the optimizer step): the nearest
  /// measured size of `key`, scaled linearly, without the factor-of-4 limit.
  [[nodiscard]] std::optional<std::pair<double, LookupSource>> lookupStreaming(const std::string& key, double elements) const;

 private:
  struct Row {
    std::string key;
    double elements = 0;
    std::int64_t width = 0;
    double seconds = 0;
  };
  std::vector<Row> m_rows;
};

/// Whether a kernel row's implementation is colo's own kernel ("colo fused", "colo fused AdamW ...") rather
/// than LibTorch's operators; KernelTable prefers it where a device holds both.
[[nodiscard]] bool isColoImplementation(const std::string& impl);

/// "<elements>x<width>" as kernels are stored.
[[nodiscard]] std::string kernelShape(std::int64_t elements, std::int64_t width);

}  // namespace colo::costmodel
