#!/usr/bin/env bash
# Engine benchmarks: sluice over memstore against golang.org/x/time/rate in
# the same run, then a million subjects, checked against the budgets in
# BENCHMARKS.md. Raw output goes to bench/out/ (gitignored); the summary is
# printed. Takes about 2 minutes.
#
# What it runs, COUNT times in alternation (one test binary):
#   go test -run '^$' -bench 'AdmitSettle3Rules|XTimeRate3' -benchmem -count 1 -cpu 1,2 .
#   go test -run '^$' -bench 'Subjects1M' -benchtime 1x -count 1 -cpu 2 .
#
#   bash bench/engine.sh            # COUNT=5 by default
#   COUNT=10 bash bench/engine.sh
# On a shared machine, take a lock so that no two benchmark runs share the
# cores: flock /tmp/sluice-bench.lock bash bench/engine.sh
set -euo pipefail
cd "$(dirname "$0")/.."

COUNT="${COUNT:-5}"

# load is the load average: on a shared machine read the figures with it.
load() { cut -d' ' -f1-3 /proc/loadavg; }

mkdir -p bench/out
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
out="bench/out/engine-$stamp.txt"
{
  echo "date: $stamp"
  echo "nproc: $(nproc)"
  echo "cpu: $(lscpu | grep 'Model name' | sed 's/Model name: *//')"
  echo "go: $(go version)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "load: $(load)"
}

# One test binary, COUNT rounds; each round measures ours and the peer back
# to back, so that a busy spell falls on both.
go test -c -o bench/out/sluice.test .
for round in $(seq 1 "$COUNT"); do
  echo "round $round/$COUNT: load $(load)" >&2
  bench/out/sluice.test -test.run '^$' -test.bench 'AdmitSettle3Rules|XTimeRate3' \
    -test.benchmem -test.count 1 -test.cpu 1,2 -test.timeout 10m >>"$out"
  bench/out/sluice.test -test.run '^$' -test.bench 'Subjects1M' \
    -test.benchtime 1x -test.count 1 -test.cpu 2 -test.timeout 10m >>"$out"
done
echo "load after: $(load)"
grep '^Benchmark' "$out"

# Medians of every benchmark and unit.
medians="$(
  awk '/^Benchmark/ { for (i = 3; i + 1 <= NF; i += 2) print $1, $(i + 1), $i }' "$out" |
    sort -k1,1 -k2,2 -k3,3g |
    awk '{ key = $1 " " $2 }
         key != prev && prev != "" { emit() }
         { v[n++] = $3; prev = key }
         END { if (prev != "") emit() }
         function emit() { m = (n % 2) ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2; print prev, m, n; n = 0 }'
)"
echo
echo "== medians (benchmark unit median runs)"
echo "$medians" | column -t

median() { echo "$medians" | awk -v b="$1" -v u="$2" '$1 == b && $2 == u { print $3 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "n/a"; else printf "%.2f", a / b }'; }
check() { awk -v v="$1" -v op="$2" -v t="$3" 'BEGIN { if (v == "n/a" || v == "") print "n/a"; else if ((op == "<=" && v <= t) || (op == ">=" && v >= t)) print "met"; else print "MISSED" }'; }

echo
echo "== budgets"
ours="$(median BenchmarkAdmitSettle3Rules ns/op)"
peer="$(median BenchmarkXTimeRate3 ns/op)"
r="$(ratio "$ours" "$peer")"
allocs="$(median BenchmarkAdmitSettle3Rules allocs/op)"
echo "3 rules, ours/peer ns/op = $ours/$peer = ${r}x (at most 3): $(check "$r" "<=" 3); allocs/op $allocs (at most 1): $(check "$allocs" "<=" 1)"
serial="$(median BenchmarkAdmitSettle3Rules-2 ns/op)"
par="$(median BenchmarkAdmitSettle3RulesParallel-2 ns/op)"
r="$(ratio "$serial" "$par")"
echo "parallel over 10,000 subjects, serial/parallel ns/op at -cpu 2 = $serial/$par = ${r}x (at least 1): $(check "$r" ">=" 1)"
echo "    the peer, serial/parallel at -cpu 2: $(ratio "$(median BenchmarkXTimeRate3-2 ns/op)" "$(median BenchmarkXTimeRate3Parallel-2 ns/op)")x (below 1.5: the second core was busy)"
bytes="$(median BenchmarkSubjects1M-2 bytes/subject)"
echo "1,000,000 subjects: $bytes bytes/subject (at most 300): $(check "$bytes" "<=" 300)"
echo
echo "raw output: $out"
