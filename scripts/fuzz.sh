#!/usr/bin/env bash
# Fuzzes every colo reader with libFuzzer (see fuzz/README.md).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]   default 20; 10 targets, so about 4 minutes plus the build
#
# libFuzzer's random seed is fixed (COLO_FUZZ_SEED, default 1), so a finding in CI is the same finding
# on a developer's machine from the same commit; set COLO_FUZZ_SEED=0 for a fresh random seed each run.
# COLO_FUZZ_TARGETS="plan validation" fuzzes only those readers.
#
# Installs clang-16 and libc++ 16 when missing (only those), builds the targets in build-fuzz/ with
# AddressSanitizer and UndefinedBehaviorSanitizer, runs each on a copy of its seed corpus (data/ and
# tests/fuzz_regressions/) for the given time, and exits non-zero on any crash, hang (an input slower
# than 10 s), leak or out-of-memory. The input at fault is saved under build-fuzz/findings/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
jobs="${COLO_FUZZ_JOBS:-2}"
seed="${COLO_FUZZ_SEED:-1}"
targets=(${COLO_FUZZ_TARGETS:-model hf_config op_graph cluster plan cost_db runs_db token_data validation residuals import})

packages=(clang-16 libc++-16-dev libc++abi-16-dev libclang-rt-16-dev cmake ninja-build nlohmann-json3-dev
          libboost-graph-dev libsqlite3-dev sqlite3)
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then missing+=("$p"); fi
done
if ((${#missing[@]})); then
  echo "fuzz: installing missing Debian packages: ${missing[*]}" >&2
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo=sudo; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

build=build-fuzz
# -O1 (libFuzzer's and AddressSanitizer's advice) keeps the instrumented build short.
cmake -S fuzz -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DCMAKE_C_COMPILER=clang-16 -DCMAKE_CXX_COMPILER=clang++-16 \
  -DCMAKE_CXX_FLAGS="-stdlib=libc++" -DCMAKE_EXE_LINKER_FLAGS="-stdlib=libc++" >/dev/null
cmake --build "$build" -j "$jobs"

# Seeds: the shipped files of each format, a cost database and a runs database built here, and every
# regression input kept for the reader.
seeds="$build/seeds"
rm -rf "$seeds"
mkdir -p "$seeds"/{model,hf_config,op_graph,cluster,plan,cost_db,runs_db,token_data,validation,residuals,import}
cp data/models/*.json data/opgraphs/*.json "$seeds/model/"
for d in data/hf/*/; do cp "$d/config.json" "$seeds/hf_config/$(basename "$d").json"; done
cp data/opgraphs/*.json "$seeds/op_graph/"
cp data/clusters/*.json "$seeds/cluster/"
cp data/plans/*.json "$seeds/plan/"
cp data/validation/public_runs.json data/validation/assumptions.json data/examples/nemo-h100-runs.csv "$seeds/validation/"
cp data/validation/published/kernels/*.json "$seeds/validation/"
python3 - "$seeds/validation" <<'PY'
import json, sys
rows = json.load(open("data/validation/public_runs.json"))
for i, row in enumerate(rows):
    json.dump([row], open(f"{sys.argv[1]}/row{i}.json", "w"))
PY
# The residual table is larger than -max_len: its first runs, a small table of the same shape.
python3 - "$seeds/residuals" <<'PY'
import json, sys
table = json.load(open("data/validation/residuals.json"))
for n in (3, 40):
    json.dump(dict(table, runs=table["runs"][:n]), open(f"{sys.argv[1]}/first{n}.json", "w"))
PY
sqlite3 "$seeds/cost_db/costs.sqlite" < tests/fuzz_regressions/seeds/cost_db.sql
sqlite3 "$seeds/runs_db/runs.sqlite" < tests/fuzz_regressions/seeds/runs_db.sql
printf '\000' > "$seeds/token_data/u16" && head -c 512 data/corpus/sonnets.txt >> "$seeds/token_data/u16"
printf '\001' > "$seeds/token_data/u32" && head -c 512 data/corpus/sonnets.txt >> "$seeds/token_data/u32"
printf '\002MMIDIDX\000\000\001\000\000\000\000\000\000\000\010' > "$seeds/token_data/bin"
head -c 512 data/corpus/sonnets.txt >> "$seeds/token_data/bin"
printf '\000' > "$seeds/import/deepspeed-launch" && cat data/examples/megatron-deepspeed-launch.sh >> "$seeds/import/deepspeed-launch"
# Regression inputs: JSON as they are (assumptions feed the validation target), databases from their SQL.
for reader in tests/fuzz_regressions/*/; do
  name="$(basename "$reader")"
  target="$name"
  [ "$name" = assumptions ] && target=validation
  [ -d "$seeds/$target" ] || continue
  for input in "$reader"*; do
    case "$input" in
      *.sql) sqlite3 "$seeds/$target/$(basename "$input" .sql).sqlite" < "$input" ;;
      *.md) ;;
      *) cp "$input" "$seeds/$target/" ;;
    esac
  done
done

status=0
for target in "${targets[@]}"; do
  corpus="$build/corpus/$target"
  findings="$build/findings/$target"
  mkdir -p "$corpus" "$findings"
  echo "fuzz: $target for ${seconds}s" >&2
  if ! "$build/fuzz_$target" "$corpus" "$seeds/$target" -max_total_time="$seconds" -timeout=10 \
      -rss_limit_mb=2048 -max_len=65536 -artifact_prefix="$findings/" -print_final_stats=1 -seed="$seed" \
      >"$build/$target.log" 2>&1; then
    echo "fuzz: $target FAILED; the input is in $findings/, the log in $build/$target.log:" >&2
    grep -E "ERROR|SUMMARY|fuzz:|Test unit written" "$build/$target.log" | head -20 >&2 || true
    status=1
  else
    grep -E "stat::number_of_executed_units" "$build/$target.log" | sed "s/^/fuzz: $target: /" >&2 || true
  fi
done
exit $status
