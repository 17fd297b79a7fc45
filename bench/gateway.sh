#!/usr/bin/env bash
# Gateway load benchmark: the mock provider loaded directly and through
# `sluice serve` (embedded SQLite store, the three default rules on), in
# alternating rounds of the same run. The markdown report goes to stdout and
# to bench/out/gateway-<stamp>.md; progress, per phase, to
# bench/out/gateway-<stamp>.log (bench/out is gitignored). Takes about 6
# minutes with the defaults.
#
#   bash bench/gateway.sh                          # go run -C bench ./gateway (builds the working tree)
#   bash bench/gateway.sh -rev HEAD                # builds the last commit only (git archive)
#   bash bench/gateway.sh -duration 5s -rounds 2   # flags are passed on
#   PERF=1 bash bench/gateway.sh                   # then a perf profile of one more saturation phase
set -euo pipefail
cd "$(dirname "$0")/.."

mkdir -p bench/out
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
report="bench/out/gateway-$stamp.md"
log="bench/out/gateway-$stamp.log"

args=("$@")
if [ "${PERF:-}" = 1 ]; then
  args+=(-perf "$PWD/bench/out/gateway-$stamp.perf.data") # absolute: go run -C bench reads paths from bench/
fi

{
  echo "date: $stamp"
  echo "nproc: $(nproc)"
  echo "cpu: $(lscpu | grep 'Model name' | sed 's/Model name: *//')"
  echo "go: $(go version)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "command: go run -C bench ./gateway ${args[*]}"
} | tee "$log" >&2

go run -C bench ./gateway "${args[@]}" 2> >(tee -a "$log" >&2) | tee "$report"
echo >&2
echo "report: $report   progress: $log" >&2
