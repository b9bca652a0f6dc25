#!/usr/bin/env bash
# colo-run per layout, GPT-2-small shapes (fp32, seq 128, gbs 4, mbs 1) on this machine's CPU ranks:
# - the share of rank 0's step time spent outside LibTorch calls (colo-run's own bookkeeping, the schedule
#   loop, data loading, waits it does not hand to LibTorch). Target: under 5% in every layout.
# - the model states a rank held (measured buffers, ZeRO-3's gathered units included) and the seconds a
#   step waited on ZeRO-2/3's all-gathers and reduce-scatters, with and without their overlap.
# - ZeRO-3's model states as a share of ZeRO-0's on dp 4. Target: at most 40%.
# (Context parallelism is not in the list: GPT-2 trains with dropout, which the ring attention does not
# apply.)
#   bench/executor_overhead.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build=${1:-build}
steps=${2:-3}
bin="$build/bin"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin/colo-run" prepare "$(dirname "$0")/../data/corpus/declaration.txt" --out "$work/tokens.u16" >/dev/null
# name | colo-plan evaluate options | colo-run options
layouts=(
  "dp4 ZeRO-0|--gpus 4 --dp 4 --zero 0|"
  "dp4 ZeRO-2|--gpus 4 --dp 4 --zero 2|"
  "dp4 ZeRO-2 no overlap|--gpus 4 --dp 4 --zero 2|--no-overlap"
  "dp4 ZeRO-3|--gpus 4 --dp 4 --zero 3|"
  "dp4 ZeRO-3 no overlap|--gpus 4 --dp 4 --zero 3|--no-overlap"
  "tp2 dp2 sp|--gpus 4 --tp 2 --dp 2 --sp --zero 1|"
  "pp2 dp2 zero-bubble|--gpus 4 --pp 2 --dp 2 --zero 1 --schedule zb|"
  "dp2 ZeRO-1 offload 0.5|--gpus 2 --dp 2 --zero 1 --offload-optimizer 0.5|"
)
printf '%-24s %10s %12s %9s %14s %12s\n' layout "step (s)" "in LibTorch" "outside" "model states" "ZeRO waits"
for entry in "${layouts[@]}"; do
  IFS='|' read -r name options run <<<"$entry"
  # shellcheck disable=SC2086
  "$bin/colo-plan" evaluate --model gpt2-small --cluster localhost-cpu --mbs 1 --gbs 4 --seq-len 128 --precision fp32 \
    $options --out "$work/plan.json" >/dev/null
  # shellcheck disable=SC2086
  "$bin/colo-run" "$work/plan.json" --data "$work/tokens.u16" --steps "$steps" --json --quiet $run >"$work/run.json"
  python3 - "$work/run.json" "$name" "$work/states.txt" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
inside = r["compute_s"] / r["wall_s"]
states = r["model_state_bytes"] / 2**20
print(f"{sys.argv[2]:<24} {r['step_time_s']:>10.3f} {100 * inside:>11.1f}% {100 * (1 - inside):>8.1f}% "
      f"{states:>10.1f} MiB {1e3 * r.get('zero_comm_wait_s', 0):>9.1f} ms")
with open(sys.argv[3], "a") as f:
    f.write(f"{sys.argv[2]}\t{r['model_state_bytes']}\n")
PY
done
python3 - "$work/states.txt" <<'PY'
import sys
states = dict(line.rstrip("\n").split("\t") for line in open(sys.argv[1]))
ratio = float(states["dp4 ZeRO-3"]) / float(states["dp4 ZeRO-0"])
print(f"ZeRO-3 holds {100 * ratio:.1f}% of ZeRO-0's model states on dp 4 (target: at most 40%)")
PY
