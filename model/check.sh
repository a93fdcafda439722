#!/usr/bin/env bash
# Model-checks model/claim.pml with spin, every check in model/configs.txt
# (or only those named as arguments), and fails on any unexpected result.
#
#   model/check.sh [name...]
#
# With no names it runs every check but those marked "extra".
# MEMLIM (MB, default 4096) caps each search; pan stops there and the
# check fails as incomplete. WORK (default: a temporary directory) keeps
# pan's sources and trails. spin is installed with apt-get when missing
# and this runs as root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
model=$here/claim.pml
MEMLIM=${MEMLIM:-4096}

if ! command -v spin >/dev/null || ! command -v cc >/dev/null; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    echo "[model] installing spin and gcc with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || true
    apt-get install -y -qq spin gcc >/dev/null
  fi
fi
command -v spin >/dev/null || { echo "[model] spin is not installed (Debian package spin) and cannot be installed here"; exit 1; }
command -v cc >/dev/null || { echo "[model] no C compiler (cc) for spin's verifier"; exit 1; }

work=${WORK:-$(mktemp -d)}
mkdir -p "$work"
[[ -n ${WORK:-} ]] || trap 'rm -rf "$work"' EXIT

want=" $* "
failed=0
total_states=0
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
trim() { local s=$1; s=${s#"${s%%[![:space:]]*}"}; printf '%s' "${s%"${s##*[![:space:]]}"}"; }
start_all=$(now)
printf '%-20s %-8s %12s %8s  %s\n' check result states seconds note
while IFS='|' read -r name defs expect extra; do
  name=$(trim "$name"); defs=$(trim "${defs:-}"); expect=$(trim "${expect:-}"); extra=$(trim "${extra:-}")
  [[ -z $name || $name == \#* ]] && continue
  if [[ $# -gt 0 && $want != *" $name "* ]]; then continue; fi
  if [[ -n $extra && $extra != extra ]]; then
    echo "[model] $name: a fourth field must be \"extra\" (a \"|\" in a regex?): $extra"; failed=1; continue
  fi
  # An "extra" check runs only when named.
  if [[ $# -eq 0 && $extra == extra ]]; then continue; fi
  dir=$work/$name
  mkdir -p "$dir"
  # shellcheck disable=SC2086
  (cd "$dir" && spin -a $defs "$model" >spin.out 2>&1) || { echo "[model] $name: spin -a failed"; cat "$dir/spin.out"; failed=1; continue; }
  cflags="-O2 -w -DMEMLIM=$MEMLIM -DCOLLAPSE"
  run="-m3000000"
  case $expect in
    live|livetrail*) run="$run -a -f"; cflags="$cflags -DNFAIR=3" ;;
    trail*) cflags="$cflags -DSAFETY -DBFS" ;;
    *) cflags="$cflags -DSAFETY" ;;
  esac
  if [[ $defs == *BITSTATE* ]]; then cflags="${cflags/-DCOLLAPSE/} -DBITSTATE"; run="$run -w30"; fi
  # shellcheck disable=SC2086
  (cd "$dir" && cc $cflags -o pan pan.c) || { echo "[model] $name: cc pan.c failed"; failed=1; continue; }
  t0=$(now)
  # shellcheck disable=SC2086
  (cd "$dir" && ./pan $run >pan.out 2>&1) || true
  secs=$(elapsed "$t0")
  out=$dir/pan.out
  errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$out" | tail -1)
  states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' "$out" | tail -1)
  note=""
  if grep -q "hash factor" "$out"; then note="bitstate, $(grep -o 'hash factor: [0-9.e+]*' "$out")"; fi
  incomplete=""
  if grep -q -E "max search depth too small|out of memory|reached -DMEMLIM bound|Search not completed" "$out"; then incomplete=1; fi
  result=ok
  case $expect in
    ok|live)
      if [[ $errors != 0 ]]; then
        result=VIOLATED
        (cd "$dir" && spin -t -k claim.pml.trail $defs "$model" >trail.out 2>&1) || true
        note="trail: $dir/trail.out"
      elif [[ -n $incomplete ]]; then
        result=INCOMPLETE
        note="$(grep -E 'max search depth|out of memory|reached -DMEMLIM bound|Search not completed' "$out" | head -1)"
      fi ;;
    trail*|livetrail*)
      re=${expect#*trail }
      if [[ $errors == 0 || -z $errors ]]; then
        result=NO-TRAIL; note="expected a violation matching: $re"
      else
        # shellcheck disable=SC2086
        (cd "$dir" && spin -t -k claim.pml.trail $defs "$model" >trail.out 2>&1) || true
        if grep -q -E -- "$re" "$dir/trail.out"; then
          result=trail; note=$(grep -E -- "$re" "$dir/trail.out" | head -1 | sed 's/^ *//')
        else
          result=WRONG-TRAIL; note="no line matches: $re (see $dir/trail.out)"
        fi
      fi ;;
  esac
  case $result in ok|trail) ;; *) failed=1 ;; esac
  printf '%-20s %-8s %12s %8s  %s\n' "$name" "$result" "${states:-?}" "$secs" "$note"
  if [[ -n $states ]]; then total_states=$(awk -v a="$total_states" -v b="$states" 'BEGIN { printf "%d", a + b }'); fi
done <"$here/configs.txt"
printf '%-20s %-8s %12s %8s\n' total "" "$total_states" "$(elapsed "$start_all")"
if [[ $failed != 0 ]]; then
  echo "[model] FAILED (pan's output and trails: ${WORK:-set WORK=dir to keep them})"
  exit 1
fi
echo "[model] every check gave what it should"
