#!/usr/bin/env bash
# One GPU visit in one command (about 5 minutes on one H200 with 16 cores, 70 s of it the build):
#
#   scripts/gpu-debs.sh              # once, on a machine with Debian's registry: .gpu-debs/*.deb
#   scripts/gpu-check.sh [OUT_DIR]   # on the GPU machine (default OUT_DIR: $OUT, else gpu-out)
#
# On a bare GPU machine with nvidia-smi, nvcc, CMake, ninja and python3 with a CUDA PyTorch, it unpacks
# the carried .deb files (SQLite, nlohmann/json, Boost headers, GoogleTest) into a private prefix,
# configures colo against PyTorch's LibTorch (torch.utils.cmake_prefix_path) with the CUDA kernels for
# this GPU, builds with every core, runs the gpu-labelled tests and the kernel tests, times each fused
# kernel against LibTorch's unfused operators, profiles a cost database of the library models' shapes
# on this GPU, trains a ~350M GPT (gpt2-medium, bf16, seq 1024) and a 1.3B GPT (gpt3-1.3b, seq 2048)
# with colo-run and their eager-PyTorch twins, traces two steps of each 350M run (Kineto; summed by
# kernel and phase with scripts/gpu/trace_summary.py), and writes every figure to OUT_DIR:
# summary.json (each step's status), visit.log (everything printed, the tests' results included),
# costdb.sqlite, and results.json (colo-run, colo-run-traced, colo-run-1.3b, colo-run-unfused with
# LibTorch's own operators, eager, eager-1.3b, trace-colo, trace-eager, kernels: each step's JSON).
# Each step has its own time limit; a failed step is recorded and the visit goes on. Without a GPU it
# stops at once with exit 3 and says why.
#
# COLO_GPU_CHECK_BUDGET=SECONDS bounds the whole visit: each step's limit is cut to what is left (less a
# margin for the summary), and a step that would start with under 15 s left is skipped and recorded so.
#
# COLO_GPU_CHECK_ONLY="PATTERN ..." runs only the steps whose names match one of the shell patterns (and
# always the set-up: configure, build): a short second visit, e.g. COLO_GPU_CHECK_ONLY="gpu-tests kernels-*".
#
# COLO_GPU_CHECK_REHEARSE=1 runs every step on a machine without a GPU instead (CPU LibTorch, the CPU
# device, tiny models, the system's packages when .gpu-debs is absent): it checks the script itself.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$(pwd)
out=${1:-${OUT:-gpu-out}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
log="$out/visit.log"
: >"$log"
summary="$out/summary.json"
# Each step's JSON goes to $results; results.json in OUT_DIR holds them all, rewritten after each step.
work=/tmp/colo-gpu-run
results="$work/results"
rm -rf "$results"
mkdir -p "$results"
started=$(date +%s)
declare -a steps=()

note() { echo "[$(($(date +%s) - started))s] $*" | tee -a "$log"; }
# record NAME STATUS DETAIL (the summary is rewritten at once: a visit cut off still leaves it)
write_summary() {
  { echo "{\"steps\": ["; (IFS=,; echo "${steps[*]}"); echo "]}"; } >"$summary"
  python3 - "$results" "$out/results.json" <<'PY' 2>/dev/null || true
import json, os, sys
merged = {}
for name in sorted(os.listdir(sys.argv[1])):
    if name.endswith(".json"):
        try:
            merged[name[:-5]] = json.load(open(os.path.join(sys.argv[1], name)))
        except ValueError:
            merged[name[:-5]] = "unreadable: " + open(os.path.join(sys.argv[1], name)).read()[-2000:]
json.dump(merged, open(sys.argv[2], "w"), indent=1)
PY
}
record() { steps+=("{\"step\": \"$1\", \"status\": \"$2\", \"detail\": \"${3//\"/\'}\", \"at_s\": $(($(date +%s) - started))}"); write_summary; }
finish() {
  write_summary
  note "summary in $summary"
}
budget=${COLO_GPU_CHECK_BUDGET:-0}
only=${COLO_GPU_CHECK_ONLY:-}
# selected NAME: whether COLO_GPU_CHECK_ONLY leaves step NAME in.
selected() {
  [ -z "$only" ] && return 0
  case "$1" in configure | configure-kernels-only | build) return 0 ;; esac
  local pattern
  for pattern in $only; do
    # shellcheck disable=SC2254
    case "$1" in $pattern) return 0 ;; esac
  done
  return 1
}
# run NAME LIMIT_SECONDS COMMAND...: the command's output goes to the log; its status is recorded.
run() {
  local name=$1 limit=$2
  shift 2
  if ! selected "$name"; then record "$name" skipped "not in COLO_GPU_CHECK_ONLY"; return 1; fi
  if [ "$budget" -gt 0 ]; then
    local left=$((budget - 10 - ($(date +%s) - started)))
    if [ "$left" -lt 15 ]; then note "== $name skipped: ${left}s of the budget left"; record "$name" skipped "budget spent"; return 1; fi
    [ "$limit" -gt "$left" ] && limit=$left
  fi
  note "== $name (limit ${limit}s): $*"
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then record "$name" ok ""; else record "$name" failed "exit $rc"; note "$name failed (exit $rc)"; fi
  return $rc
}

rehearse=${COLO_GPU_CHECK_REHEARSE:-0}
device=cuda
backend=nccl
if [ "$rehearse" = 1 ]; then
  device=cpu
  backend=gloo
  note "rehearsal: CPU device, Gloo, tiny shapes"
fi

# 1. A GPU, or a clean stop.
if [ "$rehearse" = 1 ]; then
  record gpu skipped "rehearsal"
elif ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >>"$log" 2>&1; then
  note "no GPU here: nvidia-smi is missing or sees no device; this script needs a CUDA GPU"
  record gpu failed "no nvidia-smi or no device"
  finish
  exit 3
elif ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >>"$log" 2>&1; then
  note "python3 has no CUDA PyTorch (import torch; torch.cuda.is_available() is not true)"
  record pytorch failed "no CUDA PyTorch"
  finish
  exit 3
else
  gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)
  record gpu ok "$gpu"
  note "GPU: $gpu"
fi
# The cluster file of this card (the cost database's device matches its GPU name).
cluster=dgx-h100
[ "$rehearse" != 1 ] && nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && cluster=hgx-h200
if [ "$rehearse" = 1 ]; then sm=80; else sm=$(python3 -c 'import torch; p = torch.cuda.get_device_properties(0); print(f"{p.major}{p.minor}")'); fi

# 2. The carried build dependencies, unpacked into a private prefix (never into /).
prefix=/tmp/colo-debs
if [ "$rehearse" = 1 ] && ! ls .gpu-debs/*.deb >/dev/null 2>&1; then
  record debs skipped "rehearsal: the system's packages"
elif ! ls .gpu-debs/*.deb >/dev/null 2>&1; then
  note "no .gpu-debs/*.deb: run scripts/gpu-debs.sh on a machine with Debian's registry and carry .gpu-debs"
  record debs failed "missing .gpu-debs"
  finish
  exit 3
else
  mkdir -p "$prefix"
  for f in .gpu-debs/*.deb; do dpkg -x "$f" "$prefix"; done
  export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  record debs ok "$(ls .gpu-debs/*.deb | wc -l) packages"
fi
sqlite=()
[ -f "$prefix/usr/include/sqlite3.h" ] && sqlite=(-DSQLite3_INCLUDE_DIR="$prefix/usr/include" -DSQLite3_LIBRARY="$prefix/usr/lib/x86_64-linux-gnu/libsqlite3.so")

# 3. Configure against PyTorch's LibTorch (CMake finds NCCL's header beside PyTorch's NCCL wheel).
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
nccl_include=$(python3 -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "include"))' 2>/dev/null || true)
cxxflags=""
[ -n "$nccl_include" ] && [ -f "$nccl_include/nccl.h" ] && cxxflags="-I$nccl_include"
jobs=$(nproc)
build=${COLO_GPU_BUILD_DIR:-build-gpu}
cmake_args=(-S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLO_BUILD_UI=OFF -DCOLO_BUILD_TESTS=ON -DCOLO_WITH_CUDA=ON
  -DCOLO_CUDA_ARCHITECTURES="$sm" -DCMAKE_CUDA_COMPILER="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
  -DCMAKE_PREFIX_PATH="$torch_prefix;$prefix/usr" "${sqlite[@]}" -DCMAKE_CXX_FLAGS="$cxxflags")
executor=ON
if ! run configure 180 cmake "${cmake_args[@]}"; then
  note "configure with LibTorch failed: the CUDA kernels and their tests alone, without the executor and profiler"
  executor=OFF
  rm -rf "$build"
  run configure-kernels-only 120 cmake "${cmake_args[@]}" -DCOLO_BUILD_EXECUTOR=OFF || { finish; exit 1; }
fi
grep -E "COLO_|CUDA LibTorch" "$build/CMakeCache.txt" | grep -E "COLO_TORCH_CUDA|COLO_WITH_CUDA|COLO_CUDA_ARCH" >>"$log" 2>&1

# 4. Build (-k 0: one target that does not compile leaves the others to run).
targets=(colo_kernels_tests colo_kernels_cuda_tests colo-plan)
[ "$executor" = ON ] && targets+=(colo_kernels_torch_tests colo-bench-kernels colo-profile colo-run)
build_limit=300
[ "$rehearse" = 1 ] && build_limit=1800  # two cores, not sixteen
run build "$build_limit" cmake --build "$build" -j "$jobs" --target "${targets[@]}" -- -k 0

# 5. Tests: the gpu label and the kernels' CPU suites.
run gpu-tests 120 ctest --test-dir "$build" -R "Kernels|CudaKernels|KernelsTorchOps|KernelsAgainstLibTorch" --output-on-failure \
  --output-junit "$work/gpu-tests.xml"

# 6. A cost database of the 350M model's shapes on this GPU first (colo-run's prediction reads it), then
# the ~350M GPT: colo-run (bf16, fused kernels, NCCL) and its eager-PyTorch twin; then each fused kernel
# against LibTorch's unfused operators; then the larger library models' shapes (each bounded in time;
# --resume adds) and the collectives, as the budget allows.
# profile_model MODEL LIMIT [MICRO_BATCHES]
profile_model() {
  run "profile-$1" "$2" "$build/bin/colo-profile" --model "$1" --db "$out/costdb.sqlite" --device "$device" --dtype bf16 \
    --tp 1,2,4,8 --mbs "${3:-1,2}" --resume --quiet
}
first_model=gpt2-medium
[ "$rehearse" = 1 ] && first_model=tiny-gpt
# The benchmark's own micro-batch (8) too, so its prediction reads its exact shapes.
[ -x "$build/bin/colo-profile" ] && profile_model "$first_model" 60 1,2,8

# Each fused kernel against LibTorch's unfused operators.
if [ -x "$build/bin/colo-bench-kernels" ]; then
  shape="--tokens 8192 --hidden 1024 --vocab 50304"
  [ "$rehearse" = 1 ] && shape="--tokens 128 --hidden 128 --vocab 512 --repetitions 2"
  run kernels-bench 90 bash -c "'$build/bin/colo-bench-kernels' --device $device --dtype bf16 $shape --json > '$results/kernels.json'"
  # The norms in Kineto's trace: device time per kernel and the host's CUDA calls, fused against LibTorch's.
  for kernel in layernorm rmsnorm; do
    run "kernels-trace-$kernel" 30 "$build/bin/colo-bench-kernels" --device $device --dtype bf16 $shape --only $kernel \
      --trace "$work/trace-kernels-$kernel.json"
    [ -s "$work/trace-kernels-$kernel.json" ] && python3 scripts/gpu/trace_summary.py "$work/trace-kernels-$kernel.json" --steps 20 \
      >"$results/trace-kernels-$kernel.json" 2>>"$log"
  done
  # LibTorch's warning at each synchronising call it makes (a few repetitions: one warning each).
  run kernels-sync-debug 30 "$build/bin/colo-bench-kernels" --device $device --dtype bf16 $shape --only layernorm --repetitions 2 --sync-debug
fi

if [ -x "$build/bin/colo-run" ]; then
  "$build/bin/colo-run" prepare data/corpus/declaration.txt --out "$work/tokens.u16" >>"$log" 2>&1
  # plan_for MODEL SEQ NAME: a one-GPU bf16 plan with micro-batch 8, predicted on this card's cluster
  # file (and with this visit's cost database, explained, into the log).
  plan_for() {
    if [ "$rehearse" = 1 ]; then
      "$build/bin/colo-plan" evaluate --model tiny-gpt --cluster localhost-cpu --gpus 1 --precision bf16 --seq-len 64 --mbs 2 --gbs 2 \
        --out "$work/$3.plan.json" >>"$log" 2>&1
      return
    fi
    "$build/bin/colo-plan" evaluate --model "$1" --cluster "$cluster" --gpus 1 --precision bf16 --seq-len "$2" --mbs 8 --gbs 8 \
      --out "$work/$3.plan.json" >>"$log" 2>&1
    [ -s "$out/costdb.sqlite" ] && "$build/bin/colo-plan" evaluate --model "$1" --cluster "$cluster" --gpus 1 --precision bf16 \
      --seq-len "$2" --mbs 8 --gbs 8 --costdb "$out/costdb.sqlite" --explain >>"$log" 2>&1
  }
  # colo_run NAME PLAN LIMIT ARGS...: colo-run's JSON result into results/NAME.json.
  colo_run() {
    local name=$1 planName=$2 limit=$3
    shift 3
    run "$name" "$limit" bash -c "'$build/bin/colo-run' '$work/$planName.plan.json' --data '$work/tokens.u16' --backend $backend --json $* \
      > '$results/$name.json'"
  }
  costdb=""
  [ -s "$out/costdb.sqlite" ] && costdb="--costdb $out/costdb.sqlite"
  plan_for gpt2-medium 1024 gpt2-medium
  colo_run colo-run gpt2-medium 120 --steps 20 "$costdb"
  # Every fused kernel in the model (LayerNorm too), against auto's measured-faster set above.
  colo_run colo-run-all-fused gpt2-medium 90 --steps 20 --fused-kernels on
  # Where the step's time goes: two steps in Kineto's trace, summed by kernel and by colo's phase.
  colo_run colo-run-traced gpt2-medium 90 --steps 6 --quiet --trace "$work/trace-colo.json"
  [ -s "$work/trace-colo.json" ] && python3 scripts/gpu/trace_summary.py "$work/trace-colo.json" >"$results/trace-colo.json" 2>>"$log"
  # The same with every fused kernel: colo's norm kernels against LibTorch's above, in device time.
  colo_run colo-run-all-fused-traced gpt2-medium 90 --steps 6 --quiet --fused-kernels on --trace "$work/trace-colo-fused.json"
  [ -s "$work/trace-colo-fused.json" ] &&
    python3 scripts/gpu/trace_summary.py "$work/trace-colo-fused.json" >"$results/trace-colo-fused.json" 2>>"$log"
fi
if [ "$rehearse" != 1 ]; then
  run eager-twin 90 bash -c "python3 scripts/gpu/eager_gpt.py --layers 24 --hidden 1024 --heads 16 --vocab 50257 --seq 1024 --batch 8 \
    --trace '$work/trace-eager.json' > '$results/eager.json'"
  [ -s "$work/trace-eager.json" ] && python3 scripts/gpu/trace_summary.py "$work/trace-eager.json" >"$results/trace-eager.json" 2>>"$log"
fi
# A 1.3B GPT at sequence 2048 (GPT-3 XL): the size the issue's MFU target is about, both ways.
if [ -x "$build/bin/colo-run" ] && [ "$rehearse" != 1 ]; then
  profile_model gpt3-1.3b 45 8
  plan_for gpt3-1.3b 2048 gpt3-1.3b
  colo_run colo-run-1.3b gpt3-1.3b 100 --steps 12 "$costdb"
  # Where the 1.3B step's time goes (its GEMMs against their isolated times in the database).
  colo_run colo-run-1.3b-traced gpt3-1.3b 60 --steps 4 --quiet --trace "$work/trace-colo-1.3b.json"
  [ -s "$work/trace-colo-1.3b.json" ] &&
    python3 scripts/gpu/trace_summary.py "$work/trace-colo-1.3b.json" >"$results/trace-colo-1.3b.json" 2>>"$log"
  colo_run colo-run-1.3b-all-fused gpt3-1.3b 100 --steps 12 --fused-kernels on
  run eager-twin-1.3b 90 bash -c "python3 scripts/gpu/eager_gpt.py --layers 24 --hidden 2048 --heads 16 --vocab 50257 --seq 2048 --batch 8 \
    --steps 10 > '$results/eager-1.3b.json'"
fi
[ -x "$build/bin/colo-run" ] && colo_run colo-run-unfused gpt2-medium 90 --steps 20 --fused-kernels off
# The Llama family on the GPU (RMSNorm, SwiGLU, rotary, grouped-query attention, a tied 128K vocabulary):
# Llama 3.2 1B's config.json, micro-batch 4 at sequence 2048, predicted with its profiled shapes.
if [ -x "$build/bin/colo-run" ] && [ "$rehearse" != 1 ]; then
  llama=scripts/gpu/llama3.2-1b.json
  run profile-llama3.2-1b 45 "$build/bin/colo-profile" --model "$llama" --db "$out/costdb.sqlite" --device "$device" --dtype bf16 \
    --tp 1,2,4,8 --mbs 1,2,4 --seq-len 2048 --resume --quiet
  "$build/bin/colo-plan" evaluate --model "$llama" --cluster "$cluster" --gpus 1 --precision bf16 --seq-len 2048 --mbs 4 --gbs 4 \
    --out "$work/llama3.2-1b.plan.json" >>"$log" 2>&1
  "$build/bin/colo-plan" evaluate --model "$llama" --cluster "$cluster" --gpus 1 --precision bf16 --seq-len 2048 --mbs 4 --gbs 4 \
    --costdb "$out/costdb.sqlite" --explain >>"$log" 2>&1
  colo_run colo-run-llama3.2-1b llama3.2-1b 100 --steps 12 "$costdb"
  colo_run colo-run-llama3.2-1b-unfused llama3.2-1b 100 --steps 12 --fused-kernels off
fi
# A colo-run that died of a signal: its stack again under cuda-gdb (symbols of colo-run's own functions
# come from its symbol table) and the offsets its crash report printed, named by addr2line.
if [ -x "$build/bin/colo-run" ] && grep -q "fatal signal" "$log"; then
  offsets=$(grep -o "colo-run+0x[0-9a-f]*" "$log" | sed 's/colo-run+//' | sort -u | head -40)
  [ -n "$offsets" ] && command -v addr2line >/dev/null && addr2line -f -C -e "$build/bin/colo-run" $offsets >>"$log" 2>&1
  command -v cuda-gdb >/dev/null && run crash-under-gdb 60 cuda-gdb -batch -ex run -ex bt -ex "info registers rip rsp" \
    --args "$build/bin/colo-run" "$work/gpt2-medium.plan.json" --data "$work/tokens.u16" --backend $backend --steps 2 --quiet --json
fi


if [ -x "$build/bin/colo-profile" ]; then
  world=2
  [ "$rehearse" = 1 ] || world=$(nvidia-smi -L | wc -l)
  run "collectives-$backend" 30 "$build/bin/colo-profile" collectives --db "$out/costdb.sqlite" --backend "$backend" --world "$world" \
    --sizes 1024,1048576,16777216 --quiet
  if [ "$rehearse" != 1 ]; then
    for model in llama3-8b mixtral-8x7b llama3-70b gpt3-175b; do profile_model "$model" 45; done
  fi
fi

# The kernel benchmark's traces come back compressed (a few MB): Perfetto opens them.
for f in "$work"/trace-kernels-*.json; do [ -s "$f" ] && gzip -c "$f" >"$out/$(basename "$f").gz"; done

# 9. The figures side by side.
python3 - "$out" >>"$log" 2>&1 <<'PY'
import json, os, sys
out = sys.argv[1]
def load(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except Exception:
        return None
results = load("results.json") or {}
def memory(name, colo):
    gib = 2**30
    start, held = colo.get("step_start_tensor_bytes", 0), colo.get("forward_held_bytes", 0)
    states, predicted_states = colo.get("model_state_bytes", 0), colo.get("predicted_model_state_bytes", 0)
    print(f"  {name} memory: model states {states/gib:.2f} GiB (predicted {predicted_states/gib:.2f}), allocated at step start "
          f"{start/gib:.2f} GiB, held after the forward +{held/gib:.2f} GiB, peak {colo.get('tensor_memory_bytes', 0)/gib:.2f} GiB "
          f"(predicted {colo.get('predicted_tensor_bytes', 0)/gib:.2f}; above model states {(colo.get('predicted_tensor_bytes', 0) - predicted_states)/gib:.2f})")
kernels = results.get("kernels")
if isinstance(kernels, dict):
    for k in kernels.get("kernels", []):
        print(f"kernel {k['kernel']}: fused {k['fused_s']*1e6:.1f} us, LibTorch {k['unfused_s']*1e6:.1f} us on the device "
              f"({k['speedup']:.2f}x); as called {k.get('speedup_as_called', 0):.2f}x; host {k.get('fused_host_s', 0)*1e6:.0f} "
              f"vs {k.get('unfused_host_s', 0)*1e6:.0f} us")
llama = results.get("colo-run-llama3.2-1b")
if isinstance(llama, dict):
    print(f"colo-run-llama3.2-1b: step {llama['step_time_s']*1e3:.1f} ms, predicted {llama.get('predicted_step_time_s', 0)*1e3:.1f} ms, "
          f"losses {llama['losses'][0]:.2f} -> {llama['losses'][-1]:.2f}")
    memory("llama3.2-1b", llama)
    unfused = results.get("colo-run-llama3.2-1b-unfused")
    if isinstance(unfused, dict):
        print(f"  with LibTorch's operators (--fused-kernels off): {unfused['step_time_s']*1e3:.1f} ms, "
              f"peak {unfused.get('tensor_memory_bytes', 0)/2**30:.2f} GiB")
for colo_name, eager_name, layers, hidden, seq in [("colo-run", "eager", 24, 1024, 1024), ("colo-run-1.3b", "eager-1.3b", 24, 2048, 2048)]:
    colo, eager = results.get(colo_name), results.get(eager_name)
    if not isinstance(colo, dict) or not isinstance(eager, dict):
        continue
    params = eager["params"]; tokens = colo["tokens_per_step"]
    flops = 6 * params * tokens + 12 * layers * hidden * seq * tokens
    colo_mfu = flops / colo["step_time_s"] / 989e12
    print(f"{colo_name}: step {colo['step_time_s']*1e3:.1f} ms (MFU {colo_mfu:.1%}), eager {eager['step_s']*1e3:.1f} ms (MFU {eager['mfu']:.1%})")
    if colo.get("predicted_step_time_s"):
        print(f"  predicted step {colo['predicted_step_time_s']*1e3:.1f} ms ({colo['predicted_step_time_s']/colo['step_time_s']-1:+.1%}), "
              f"peak allocated {colo['tensor_memory_bytes']/2**30:.2f} GiB vs predicted {colo.get('predicted_tensor_bytes', 0)/2**30:.2f} GiB"
              f" (eager {eager['peak_allocated_bytes']/2**30:.2f} GiB)")
    memory(colo_name, colo)
PY
finish
exit 0
