#!/usr/bin/env bash
# Downloads (on a machine with Debian's package registry) the .deb files a GPU machine without a network
# needs to build colo: SQLite, nlohmann/json, Boost headers, GoogleTest. They land in .gpu-debs/ (ignored
# by git), which scripts/gpu-check.sh unpacks there. About 12 MB.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p .gpu-debs
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.gpu-debs/' "$exclude" 2>/dev/null || echo '/.gpu-debs/' >>"$exclude"
cd .gpu-debs
apt-get download nlohmann-json3-dev libboost1.74-dev libgtest-dev googletest libsqlite3-dev libsqlite3-0 2>&1 | grep -v "^W: " || true
ls -1 *.deb
