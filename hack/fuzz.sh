#!/usr/bin/env bash
# Runs every Go fuzz target (func FuzzXxx in a *_fuzz_test.go file) for FUZZTIME each
# (default 30s; FUZZTIME=10m for a longer hunt) with FUZZPARALLEL workers (default 1), and
# prints each target's last progress line (its executions) and result. FuzzApplyConfig starts
# a real node first (about a minute), so it gets FUZZTIME_SLOW (default 90s). A target's seed
# corpus is testdata/fuzz/<Target>/ next to it; a failing input is written there too: commit
# it with the fix, as a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZTIME=${FUZZTIME:-30s}
FUZZTIME_SLOW=${FUZZTIME_SLOW:-90s}
FUZZPARALLEL=${FUZZPARALLEL:-1}
# Minimizing an input spends executions that are not counted: keep it short (the failing
# input is kept whole anyway).
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-5s}

log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=()

while read -r file; do
	pkg=./$(dirname "$file")
	for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file"); do
		time=$FUZZTIME
		[ "$target" = FuzzApplyConfig ] && time=$FUZZTIME_SLOW
		echo "== $target ($pkg, $time)"
		status=0
		go test -run='^$' -fuzz="^${target}\$" -fuzztime="$time" -fuzzminimizetime="$FUZZMINIMIZETIME" \
			-parallel="$FUZZPARALLEL" "$pkg" >"$log" 2>&1 || status=$?
		grep '^fuzz: elapsed: .*execs' "$log" | tail -n 1 || true
		grep -v '^fuzz: elapsed' "$log" || true
		[ "$status" = 0 ] || failed+=("$target")
	done
done < <(grep -rl '^func Fuzz' --include='*_fuzz_test.go' internal cmd | sort)

if [ ${#failed[@]} -gt 0 ]; then
	echo "fuzz targets that failed: ${failed[*]}" >&2
	exit 1
fi
