#!/usr/bin/env bash
# Executor overhead per layout: the share of rank 0's step time spent outside LibTorch calls (colo-run's
# own bookkeeping, the schedule loop, data loading, waits it does not hand to LibTorch), for GPT-2-small
# shapes on this machine's CPU ranks. Target: under 5% in every layout. (Context parallelism is not in the
# list: GPT-2 trains with dropout, which colo-run's ring attention does not apply.)
#   bench/executor_overhead.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build=${1:-build}
steps=${2:-3}
bin="$build/bin"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin/colo-run" prepare "$(dirname "$0")/../data/corpus/declaration.txt" --out "$work/tokens.u16" >/dev/null
layouts=(
  "dp4 ZeRO-0|--gpus 4 --dp 4 --zero 0"
  "dp4 ZeRO-2|--gpus 4 --dp 4 --zero 2"
  "dp4 ZeRO-3|--gpus 4 --dp 4 --zero 3"
  "tp2 dp2 sp|--gpus 4 --tp 2 --dp 2 --sp --zero 1"
  "pp2 dp2 zero-bubble|--gpus 4 --pp 2 --dp 2 --zero 1 --schedule zb"
  "dp2 ZeRO-1 offload 0.5|--gpus 2 --dp 2 --zero 1 --offload-optimizer 0.5"
)
printf '%-24s %10s %12s %10s\n' layout "step (s)" "in LibTorch" "outside"
for entry in "${layouts[@]}"; do
  name=${entry%%|*}
  options=${entry#*|}
  # shellcheck disable=SC2086
  "$bin/colo-plan" evaluate --model gpt2-small --cluster localhost-cpu --mbs 1 --gbs 4 --seq-len 128 --precision fp32 \
    $options --out "$work/plan.json" >/dev/null
  "$bin/colo-run" "$work/plan.json" --data "$work/tokens.u16" --steps "$steps" --json --quiet >"$work/run.json"
  python3 - "$work/run.json" "$name" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
inside = r["compute_s"] / r["wall_s"]
print(f"{sys.argv[2]:<24} {r['step_time_s']:>10.3f} {100 * inside:>11.1f}% {100 * (1 - inside):>9.1f}%")
EOF
done
