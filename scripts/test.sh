#!/usr/bin/env bash
# README command 2: build everything and run every test suite with CTest. Tests labelled `gpu` skip
# with their reason when no GPU is present. With CI=true, warnings are errors.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh --deps-only
werror=OFF
cuda=AUTO
# CI compiles the CUDA kernels on every run (nvcc is there, no GPU): a missing nvcc fails the configure.
if [ "${CI:-}" = "true" ]; then werror=ON; cuda=ON; fi
cmake -S . -B build -G Ninja -DCOLO_BUILD_TESTS=ON -DCOLO_WERROR="$werror" -DCOLO_WITH_CUDA="$cuda" ${COLO_CMAKE_ARGS:-}
cmake --build build -j2
cd build
ctest --output-on-failure -j2
