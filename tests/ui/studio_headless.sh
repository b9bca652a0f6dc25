#!/usr/bin/env bash
# colo-studio on a machine without a display (ssh, CI): --help, --version and --screenshot run on the
# offscreen platform; opening the window fails with one clear line and exit 2, not Qt's abort.
# Usage: studio_headless.sh path/to/colo-studio
set -u
studio=$1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
headless() { env -u DISPLAY -u WAYLAND_DISPLAY -u QT_QPA_PLATFORM XDG_RUNTIME_DIR="$scratch" "$studio" "$@"; }
fail() { echo "FAIL: $*"; exit 1; }

out=$(headless --help 2>&1); rc=$?
[[ $rc -eq 0 ]] || fail "--help exited $rc: $out"
[[ $out == *"--screenshot"* ]] || fail "--help does not list --screenshot: $out"

out=$(headless --version 2>&1); rc=$?
[[ $rc -eq 0 && $out == *"colo-studio"* ]] || fail "--version exited $rc: $out"

out=$(headless --model tiny-gpt 2>&1); rc=$?
[[ $rc -eq 2 ]] || fail "the window without a display exited $rc, not 2: $out"
[[ $(printf '%s\n' "$out" | grep -c .) -eq 1 && $out == "colo-studio: error: no display"* ]] ||
  fail "the window without a display did not give one clear line: $out"

out=$(headless --screenshot "$scratch/shot.png" --model tiny-gpt --cluster localhost-cpu --gbs 8 2>&1); rc=$?
[[ $rc -eq 0 && -s "$scratch/shot.png" ]] || fail "--screenshot without a display exited $rc: $out"
echo "ok"
