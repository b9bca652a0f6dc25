#!/usr/bin/env bash
# README command 2: build everything and run every test suite with CTest. Tests labelled `gpu` skip
# with their reason when no GPU is present. With CI=true, warnings are errors.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh --deps-only
werror=OFF
if [ "${CI:-}" = "true" ]; then werror=ON; fi
cmake -S . -B build -G Ninja -DCOLO_BUILD_TESTS=ON -DCOLO_WERROR="$werror" ${COLO_CMAKE_ARGS:-}
cmake --build build -j2
cd build
ctest --output-on-failure -j2
