#!/usr/bin/env bash
# README command 1: install the Debian packages colo needs (only those missing), build, and run the
# main job on the built-in defaults: search the plans of GPT-3 175B on 1,024 A100s (global batch 1536),
# print the best with their reasons, and write the best plan to build/best-plan.json.
#
#   scripts/setup.sh              install + build + search
#   scripts/setup.sh --deps-only  install what is missing, nothing else (used by scripts/test.sh and CI)
#   scripts/setup.sh --main-job   only the main job, on an existing build (the README test runs this)
#
# Idempotent, and quick when everything is present (one dpkg-query, no apt-get).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Build tools and the libraries of every part. LibTorch (with Gloo) builds the profiler and the
# executor; OpenBLAS replaces the reference BLAS Debian's LibTorch would otherwise call (~75x faster CPU
# GEMMs). Qt 6 Widgets, Charts, Svg and OpenGL (Qt6Charts' CMake package needs Qt6::OpenGL) build
# colo-studio (its tests run on the offscreen platform). CMake builds every part and stops, naming the
# package, when one is missing. The fuzz targets' clang-16 and libc++ are installed by scripts/fuzz.sh.
main_job=(build/bin/colo-plan search --model gpt3-175b --cluster dgx-a100-80gb-x128 --gbs 1536 --out build/best-plan.json)
if [ "${1:-}" = "--main-job" ]; then exec "${main_job[@]}"; fi

packages=(g++ cmake ninja-build pkg-config nlohmann-json3-dev libboost-graph-dev libgtest-dev libsqlite3-dev sqlite3
          libtorch-dev libgloo-dev libopenblas0-pthread qt6-base-dev qt6-base-dev-tools qt6-charts-dev qt6-svg-dev libqt6opengl6-dev)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then missing+=("$p"); fi
done
if ((${#missing[@]})); then
  echo "setup: installing missing Debian packages: ${missing[*]}" >&2
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
else
  echo "setup: all Debian packages present" >&2
fi

if [ "${1:-}" = "--deps-only" ]; then exit 0; fi

# The same configuration as scripts/test.sh (tests included; warnings are errors under CI), so the two
# README commands share one build and the second compiles nothing the first already did.
werror=OFF
if [ "${CI:-}" = "true" ]; then werror=ON; fi
cmake -S . -B build -G Ninja -DCOLO_BUILD_TESTS=ON -DCOLO_WERROR="$werror" ${COLO_CMAKE_ARGS:-} >&2
cmake --build build -j2 >&2
echo "setup: built into build/bin; running the main job:" >&2
echo "  ${main_job[*]}" >&2
exec "${main_job[@]}"
