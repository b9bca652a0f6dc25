#!/usr/bin/env bash
# Builds colo with GCC's AddressSanitizer and UndefinedBehaviorSanitizer in build-asan/ and runs the
# unit tests that need neither Qt nor LibTorch nor a GPU under them. Exits non-zero on any failing test
# or sanitizer report (UBSan does not recover; ASan and LeakSanitizer abort the test).
#
#   scripts/sanitize.sh            configure, build (-j2, or $COLO_JOBS) and run
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
jobs="${COLO_JOBS:-2}"
build=build-asan

# The UI and the LibTorch modules are turned off explicitly: their defaults follow what the machine has.
# -O1, as AddressSanitizer's documentation recommends: reports keep their frames, and the instrumented
# build compiles in about 60% of the time -O2 takes.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DCOLO_BUILD_TESTS=ON -DCOLO_BUILD_UI=OFF -DCOLO_BUILD_EXECUTOR=OFF -DCOLO_WITH_CUDA=OFF \
  -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build "$build" -j "$jobs"

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
log="$build/sanitize.log"
# Every sanitizer report fails its test (halt/abort); the grep also catches one printed by a program
# that a test runs and whose exit code the test does not check.
set +e
ctest --test-dir "$build" -L unit -LE "gpu|ui" -j "$jobs" --output-on-failure --timeout 900 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
if grep -qE "ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:" "$log"; then
  echo "sanitize: sanitizer reports in $log:" >&2
  grep -E "ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:" "$log" | sort | uniq | head -20 >&2
  status=1
fi
exit "$status"
