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
out=$(env -u DISPLAY -u WAYLAND_DISPLAY QT_QPA_PLATFORM= XDG_RUNTIME_DIR="$scratch" "$studio" --version 2>&1); rc=$?
[[ $rc -eq 0 ]] || fail "--version with QT_QPA_PLATFORM set but empty exited $rc: $out"

out=$(headless --model tiny-gpt 2>&1); rc=$?
[[ $rc -eq 2 ]] || fail "the window without a display exited $rc, not 2: $out"
[[ $(printf '%s\n' "$out" | grep -c .) -eq 1 && $out == "colo-studio: error: no display"* ]] ||
  fail "the window without a display did not give one clear line: $out"

out=$(headless --screenshot "$scratch/shot.png" --model tiny-gpt --cluster localhost-cpu --gbs 8 2>&1); rc=$?
[[ $rc -eq 0 && -s "$scratch/shot.png" ]] || fail "--screenshot without a display exited $rc: $out"
# Bad options are one line and exit 2 (on a display, here the offscreen one); the first file that does
# not open is the one named, even when a later one opens.
offscreen() { QT_QPA_PLATFORM=offscreen XDG_RUNTIME_DIR="$scratch" "$studio" "$@"; }
expect_refused() {
  local expected=$1; shift
  out=$(offscreen "$@" 2>&1); rc=$?
  [[ $rc -eq 2 ]] || fail "$* exited $rc, not 2: $out"
  [[ $out == *"$expected"* ]] || fail "$*: expected \"$expected\" in: $out"
  [[ $(printf '%s\n' "$out" | grep -c 'colo-studio: error') -eq 1 ]] || fail "$*: not one error line: $out"
}
expect_refused '--gbs: expected 1 to 16777216 samples, got "abc"' --gbs abc
expect_refused '--gbs: expected 1 to 16777216 samples, got "0"' --gbs 0
expect_refused '--gbs: expected 1 to 16777216 samples, got "20000000"' --gbs 20000000
expect_refused '--tab: expected 0 to 5, got "9"' --tab 9
expect_refused "Unknown option 'bogus'" --bogus
expect_refused '"nosuch" is neither a file nor an entry of the models library' \
  --screenshot "$scratch/bad.png" --model nosuch --cluster localhost-cpu
echo "ok"
