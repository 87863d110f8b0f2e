#!/usr/bin/env bash
# Compares flexinfer-flashload with cp on the same data, interleaved, into a
# tmpfs. Usage: bench-vs-cp.sh [REPS] [WORKDIR] [TMPFS_DIR]
# Builds (once) a 2 GiB file and 2,000 files of 4-128 KiB under WORKDIR,
# warms the page cache, then times each tool REPS times and prints medians.
set -euo pipefail
REPS=${1:-7}
WORK=${2:-/tmp/flashload-bench}
SHM=${3:-/dev/shm}
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
FL="$ROOT/target/release/flexinfer-flashload"
[ -x "$FL" ] || cargo build --release -p flexinfer-flashload --manifest-path "$ROOT/Cargo.toml"
mkdir -p "$WORK/one" "$WORK/small"
[ -s "$WORK/one/model.safetensors" ] || head -c $((2 << 30)) /dev/urandom > "$WORK/one/model.safetensors"
if [ "$(find "$WORK/small" -type f | wc -l)" -ne 2000 ]; then
  for i in $(seq 0 1999); do
    d="$WORK/small/d$((i % 20))"; mkdir -p "$d"
    head -c $((4096 + (i * 7919) % 126976)) /dev/urandom > "$d/f$i.bin"
  done
fi
DST="$SHM/flashload-bench-dst"
now() { date +%s.%N; }
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for set in one small; do
  SRC="$WORK/$set"
  find "$SRC" -type f -exec cat {} + > /dev/null
  declare -A T=()
  for _ in $(seq "$REPS"); do
    for tool in "cp -r" "cp -a" "flashload"; do
      rm -rf "$DST"
      s=$(now)
      case "$tool" in
        "cp -r") cp -r "$SRC" "$DST" ;;
        "cp -a") cp -a "$SRC" "$DST" ;;
        flashload) RUST_LOG=warn "$FL" --src "$SRC" --dst "$DST" --progress off > /dev/null ;;
      esac
      e=$(now)
      T[$tool]+="$(echo "$e - $s" | bc) "
    done
  done
  rm -rf "$DST"
  cp_r=$(echo "${T[cp -r]}" | median); cp_a=$(echo "${T[cp -a]}" | median); fl=$(echo "${T[flashload]}" | median)
  printf '%-6s cp -r %.3f s  cp -a %.3f s  flashload %.3f s  speed-up vs cp -r %.2fx, vs cp -a %.2fx\n' \
    "$set" "$cp_r" "$cp_a" "$fl" "$(echo "$cp_r / $fl" | bc -l)" "$(echo "$cp_a / $fl" | bc -l)"
  unset T
done
