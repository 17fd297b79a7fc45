#!/usr/bin/env bash
# Prints the engine's code lines per part (no comments, no blank lines, no
# tests) beside issue 30's budgets, the root package's exported types, and
# which optional features are leaves of the core.
# A budget is a line to stay under with simpler code, not by moving code to
# a place this script does not count: every non-test Go file of the root
# package is in exactly one part.
#
#   bash scripts/enginesize.sh           # report
#   bash scripts/enginesize.sh --check   # exit 1 when a budget is missed
set -euo pipefail
cd "$(dirname "$0")/.."

# code counts the lines of Go files that are neither blank nor comments
# (line comments, and block comments on lines of their own).
code() {
  awk '
    /^[[:space:]]*\/\*/ { block = 1 }
    block { if ($0 ~ /\*\//) block = 0; next }
    /^[[:space:]]*$/ { next }
    /^[[:space:]]*\/\// { next }
    { n++ }
    END { print n + 0 }
  ' "$@"
}

# The optional features of the root package, each a leaf of the core.
declare -A part=(
  [classes]="class.go"
  [waiting]="wait.go"
  [fit]="fit.go"
  [provider_limits]="providerlimits.go"
  [sweep_attribution]="swept.go"
  [turns]="turn.go"
  [leases]="lease.go"
)
declare -A budget=(
  [core]=1700 [classes]=350 [waiting]=350 [fit]=350 [provider_limits]=350 [sweep_attribution]=350 [turns]=350 [leases]=350
  [memstore]=400 [counter]=200
)

# The list that names the features for New: neither core nor feature.
wiring=features.go
counted=" $wiring "
for p in "${!part[@]}"; do counted+="${part[$p]} "; done
core=()
for f in *.go; do
  case "$f" in *_test.go) continue ;; esac
  [[ "$counted" == *" $f "* ]] || core+=("$f")
done

missed=0
report() { # name lines budget
  local verdict=met
  if [ "$2" -gt "$3" ]; then
    verdict=MISSED
    missed=1
  fi
  printf '%-18s %6d lines  budget %5s  %s\n' "$1" "$2" "$3" "$verdict"
}

report core "$(code "${core[@]}")" "${budget[core]}"
for p in $(printf '%s\n' "${!part[@]}" | sort); do
  # shellcheck disable=SC2086
  report "$p" "$(code ${part[$p]})" "${budget[$p]}"
done
report memstore "$(code $(ls store/memstore/*.go | grep -v _test.go))" "${budget[memstore]}"
report counter "$(code $(ls internal/counter/*.go | grep -v _test.go))" "${budget[counter]}"
# The HTTP mapping (middleware, refusals, rate-limit fields), out of the
# root package since issue 30: reported, with no budget of its own.
printf '%-18s %6d lines\n' sluicehttp "$(code $(ls sluicehttp/*.go | grep -v _test.go))"
printf '%-18s %6d lines\n' "wiring" "$(code $wiring)"

types=$(go doc -short . 2>/dev/null | grep -c '^type ' || true)
verdict=met
if [ "$types" -gt 45 ]; then verdict=MISSED; missed=1; fi
printf '%-18s %6d        budget %5d  %s\n' "exported types" "$types" 45 "$verdict"
echo "core files: ${core[*]}"
# Which features are leaves: the core uses none of their names (reported;
# `go run ./internal/leaves -uses FILES` lists the uses).
# shellcheck disable=SC2046
go run ./internal/leaves -wiring "$wiring" $(for p in $(printf '%s\n' "${!part[@]}" | sort); do echo "${part[$p]}"; done)

if [ "${1:-}" = --check ] && [ "$missed" -ne 0 ]; then
  echo "enginesize: a budget is missed" >&2
  exit 1
fi
