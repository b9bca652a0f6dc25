// Efficiencies of real kernels relative to datasheet peaks; the sources of each figure are listed in
// docs/costmodel.md ("Device model").
#include "colo/costmodel/hardware.h"

#include <optional>
#include <string>
#include <utility>

namespace colo::costmodel {
namespace {

bool contains(const std::string& haystack, const char* needle) { return haystack.find(needle) != std::string::npos; }

}  // namespace

DeviceModel deviceModel(const GpuSpec& gpu, DType precision, bool flashAttention2) {
  DeviceModel d;
  const auto peak = gpu.peakFlopsPerSecond.find(precision);
  d.peakFlopsPerSecond = peak != gpu.peakFlopsPerSecond.end() ? peak->second : 0.0;
  const std::string& name = gpu.name;
  // Defaults: an unknown GPU is treated like an Ampere part.
  d.gemmEfficiency = 0.80;
  d.flashFwdEfficiency = 0.62;
  d.flashBwdEfficiency = 0.50;
  d.memoryBytesPerSecond = gpu.hbmBytesPerSecond * 0.85;
  d.streamingProcessors = 108;
  d.sustainedClock = 0.93;
  d.kernelFloorSeconds = 8e-6;  // eager PyTorch: launching a kernel costs the host ~8 us
  d.contextBytes = 0.8 * 1024 * 1024 * 1024;
  d.commChannelBytes = 10.0 * 1024 * 1024;  // SIMPLE 4 MiB + LL128 ~4.7 MiB + LL 0.5 MiB (NCCL defaults)
  d.cpuAdamParamsPerSecond = 0.25e9;
  // Lee et al. 2025 (arXiv 2507.03114), GPT and LLaMA training on A100 and H100: compute overlapped with
  // communication runs 18.9% slower on average (40% at most) than alone. NCCL runs one CTA per channel,
  // 16-32 of an H100's 132 SMs, and a GEMM sized to the full SM count then needs an extra wave.
  d.overlapSlowdown = 0.19;
  // FlashAttention-2's shares where they differ from the fused kernels above (Hopper and later), and the
  // fused kernels' shares at a query/key head dim above 128 where they were measured apart.
  std::optional<std::pair<double, double>> flash2;
  std::optional<std::pair<double, double>> wide;
  if (contains(name, "V100")) {
    d.gemmEfficiency = 0.70;  // cuBLAS fp16 HGEMM ~85-90 of 125 TFLOP/s on large shapes at boost clock
    d.flashFwdEfficiency = 0.45;
    d.flashBwdEfficiency = 0.35;
    d.memoryBytesPerSecond = gpu.hbmBytesPerSecond * 0.83;
    d.streamingProcessors = 80;
    d.sustainedClock = 0.90;  // ~1380 of 1530 MHz boost at 300 W
  } else if (contains(name, "A100")) {
    d.gemmEfficiency = 0.80;  // ~250 of 312 TFLOP/s for large bf16/fp16 GEMMs
    d.flashFwdEfficiency = 0.62;
    d.flashBwdEfficiency = 0.50;
    d.memoryBytesPerSecond = gpu.hbmBytesPerSecond * 0.85;
    d.streamingProcessors = 108;
    d.sustainedClock = 0.93;  // ~1300-1350 of 1410 MHz boost at 400 W
  } else if (contains(name, "H100") || contains(name, "H200") || contains(name, "H800") || contains(name, "GH200")) {
    d.gemmEfficiency = precision == DType::kFp8 ? 0.60 : 0.72;  // ~710 of 989 bf16; fp8 ~1200 of 1979
    d.flashFwdEfficiency = 0.55;
    d.flashBwdEfficiency = 0.42;
    // FlashAttention-2's Ampere kernels on Hopper (no wgmma/TMA): docs/costmodel.md, "Which fused
    // attention kernel".
    // Forward: 333 of 914.5 TFLOP/s (causal, 1,830 MHz). Backward: 318 without the mask, times the
    // causal/non-causal backward ratio of one PyTorch SDPA flash measurement (277.4/303.3 at 8k).
    flash2 = {0.364, 0.318};
    d.memoryBytesPerSecond = gpu.hbmBytesPerSecond * 0.82;
    d.streamingProcessors = 132;
    d.sustainedClock = 0.88;  // ~1700-1750 of 1980 MHz boost at 700 W
  } else if (contains(name, "B200") || contains(name, "B100") || contains(name, "B300")) {
    // Blackwell (B200 SXM, GB200): 148 SMs; fifth-generation tensor cores.
    // bf16: torch.matmul on B200 reaches 1.41-1.45 of 2.25 PFLOP/s on 4096^3-8192^3 (pytorch/ao PR 2427's
    // bench_matmul table, June 2025); fp8 provisional (Hopper's share). fp4 (NVFP4): the same table's
    // NVFP4 scaled products reach 5.50 and 5.37 of 9 PFLOP/s at 6144^3 and 8192^3, 0.946 of the bf16
    // share at those shapes, applied to colo's bf16 share (docs/costmodel.md, "Blackwell Ultra").
    d.gemmEfficiency = precision == DType::kFp8 ? 0.60 : precision == DType::kFp4 ? 0.542 * 0.946 : 0.542;
    // Fused attention: Hopper's shares at head dim 128 (Transformer Engine's cuDNN kernels on B200
    // measured 0.55 forward and 0.46 backward; docs/costmodel.md, "Fused attention on B200", says why the
    // backward stays 0.42). At DeepSeek's latent attention (query/key head dim 192, values 128) the same
    // measurement (SimuMax v1.2, B200 system file, sdp_fwd/sdp_bwd; data/validation/published/kernels/
    // simumax_b200_attention.json) gives 0.46 forward and 0.35 backward of the clock-held peak.
    d.flashFwdEfficiency = 0.55;
    d.flashBwdEfficiency = 0.42;
    wide = {0.46, 0.35};
    flash2 = {0.364, 0.318};  // provisional: Hopper's shares (no Blackwell figure published)
    d.memoryBytesPerSecond = gpu.hbmBytesPerSecond * 0.666;
    d.streamingProcessors = 148;
    d.sustainedClock = 0.90;
  } else if (contains(name, "4090") || contains(name, "RTX") || contains(name, "L40")) {
    d.gemmEfficiency = 0.85;  // fp32-accumulate tensor peak is the binding rate
    d.flashFwdEfficiency = 0.60;
    d.flashBwdEfficiency = 0.48;
    d.memoryBytesPerSecond = gpu.hbmBytesPerSecond * 0.85;
    d.streamingProcessors = 128;
  }
  if (flashAttention2 && flash2) {
    d.flashFwdEfficiency = flash2->first;
    d.flashBwdEfficiency = flash2->second;
    wide.reset();  // FlashAttention-2's wide-head kernels were not measured apart
  }
  d.flashWideFwdEfficiency = wide ? wide->first : d.flashFwdEfficiency;
  d.flashWideBwdEfficiency = wide ? wide->second : d.flashBwdEfficiency;
  if (contains(name, "cpu") || contains(name, "CPU")) {
    // A host CPU through LibTorch: BLAS GEMMs reach well below the FMA peak; eager ops cost ~10 us each.
    d.gemmEfficiency = 0.6;
    d.sustainedClock = 1.0;
    d.memoryBytesPerSecond = gpu.hbmBytesPerSecond * 0.7;
    d.streamingProcessors = 2;
    d.kernelFloorSeconds = 10e-6;
    d.contextBytes = 0;
    d.commChannelBytes = 0;  // Gloo: host memory
    d.overlapSlowdown = 0;   // Gloo's threads run beside compute; not modelled on CPU
    d.hostIssued = false;
    d.attentionPeakFlopsPerSecond = d.peakFlopsPerSecond;
    d.attentionGemmEfficiency = d.gemmEfficiency;
    return d;
  }
  if (precision == DType::kFp32) d.gemmEfficiency = 0.90;  // FMA pipes, not tensor cores: easier to saturate
  d.attentionPeakFlopsPerSecond = d.peakFlopsPerSecond;
  d.attentionGemmEfficiency = d.gemmEfficiency;
  if (quantizedGemms(precision)) {
    // fp8 and fp4 recipes cast the linear layers' inputs only; attention stays at 16 bits.
    const DType sixteen = gpu.peakFlopsPerSecond.count(DType::kBf16) ? DType::kBf16 : DType::kFp16;
    if (gpu.peakFlopsPerSecond.count(sixteen)) {
      const DeviceModel half = deviceModel(gpu, sixteen);
      d.attentionPeakFlopsPerSecond = half.peakFlopsPerSecond;
      d.attentionGemmEfficiency = half.gemmEfficiency;
    }
  }
  return d;
}

double communicatorBytes(const DeviceModel& device, std::int64_t members, LinkKind innermost, bool crossesNodes) {
  if (members <= 1) return 0.0;
  // Channels NCCL opens on the group's innermost link: many over NVSwitch/NVLink, fewer over a hybrid
  // cube mesh, two over PCIe, and the per-NIC rings of a network-only group. Inside a node each channel
  // has one ring connection; across nodes a tree as well.
  double channels = 8;
  switch (innermost) {
    case LinkKind::kNvSwitch:
    case LinkKind::kNvLink:
      channels = 16;
      break;
    case LinkKind::kHybridCubeMesh:
      channels = 8;
      break;
    case LinkKind::kPcie:
      channels = 2;
      break;
    default:
      channels = 8;
  }
  return device.commChannelBytes * channels * (crossesNodes ? 2.0 : 1.0);
}

}  // namespace colo::costmodel
