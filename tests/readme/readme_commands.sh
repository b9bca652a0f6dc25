#!/usr/bin/env bash
# The README as a test: runs every command of the README's ```sh blocks, in order, as printed, from a
# folder laid out like a fresh clone (the repository's files, with build/ being the build folder under
# test), and fails on the first command that exits non-zero or prints an internal error.
#
#   readme_commands.sh SOURCE_DIR BINARY_DIR
#
# Two commands are the CI job itself and are not run again inside it: the quick start's
# `scripts/setup.sh` runs only its main job (`scripts/setup.sh --main-job`: installing and building are
# what CI has just done) and `scripts/test.sh` (the command running this test) is skipped. A command that
# opens colo-studio's window is given 15 s on the offscreen platform and passes if the window is still
# up then.
set -uo pipefail
src=$(cd "$1" && pwd)
bin_dir=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for f in "$src"/* "$src"/.ci; do
  name=$(basename "$f")
  [ "$name" = build ] || [ ! -e "$f" ] || ln -s "$f" "$work/$name"
done
ln -s "$bin_dir" "$work/build"
cd "$work"
# Outputs the README's commands write, so a run never reads a stale one from an earlier run.
rm -rf build/best-plan.json build/tiny-plan.json build/declaration.u16 build/ckpt build/runs.sqlite build/cpu.sqlite \
       build/shot.png shot.png my-plans

commands=$(awk '
  /^```sh$/ { inside = 1; next }
  /^```/ { inside = 0; next }
  inside {
    line = $0
    if (pending != "") { line = pending " " line; pending = "" }
    if (line ~ /\\$/) { sub(/\\$/, "", line); pending = line; next }
    print line
  }' "$src/README.md")

export QT_QPA_PLATFORM=offscreen
ran=0
failed=0
while IFS= read -r command; do
  [ -n "${command// }" ] || continue
  case "$command" in
    "scripts/test.sh"*) echo "readme: skip (this is CI's own command): $command"; continue ;;
    "scripts/setup.sh"*) command="scripts/setup.sh --main-job" ;;
  esac
  echo "readme: \$ $command"
  window=0
  if [[ "$command" == *colo-studio* && "$command" != *--screenshot* ]]; then window=1; fi
  start=$(date +%s)
  if ((window)); then
    timeout 15 bash -c "$command" > out.log 2>&1
    status=$?
    if ((status == 124)); then status=0; echo "readme:   (window open after 15 s; closed)"; fi
  else
    bash -c "$command" > out.log 2>&1
    status=$?
  fi
  ran=$((ran + 1))
  echo "readme:   exit $status in $(( $(date +%s) - start )) s"
  if ((status != 0)) || grep -q "internal error" out.log; then
    echo "readme: FAILED: $command (exit $status); its output:"
    tail -n 40 out.log
    failed=1
    break
  fi
done <<< "$commands"
echo "readme: $ran commands run"
((ran >= 20)) || { echo "readme: expected the README's tour (20+ commands), found $ran"; exit 1; }
exit $failed
