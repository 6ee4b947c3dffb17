#!/usr/bin/env bash
# The test suite: vet, golangci-lint (hack/lint.sh), then every package's tests with the race
# detector. Integration tests start real machined, apid and etcd processes on loopback addresses
# (127.5.x.y).
#
# The tests run with -json through hack/testcheck, which prints what go test prints, fails the
# run on a skipped test whose reason is not allowed in hack/skips.txt, and ends with the skips
# and each package's duration. The raw events are kept in _out/test.json.
set -euo pipefail
cd "$(dirname "$0")/.."

# step NAME CMD...: runs one step and says how long it took (CI's budget is 45 minutes on two
# cores: a step that grows shows here first).
step() {
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "hack/test.sh: $name took $((SECONDS - start)) s"
}

step vet go vet ./...
step lint ./hack/lint.sh

mkdir -p _out
go build -o _out/testcheck ./hack/testcheck

# -count=1: the end-to-end packages build the node binaries themselves, which the test cache
# cannot see, so a cached pass could hide a change. -shuffle=on: no test may lean on another's
# side effects; each package prints its seed (-test.shuffle N) to rerun a failure in the same
# order. A suite that changes one shared cluster in a written order says so (testenv.KeepOrder).
#
# The longest suites are named first: go test starts packages in the order it is given them, two
# at a time on this 2-core machine, so the metal suite (about 40 minutes of QEMU boots) runs from
# the start beside everything else instead of after the packages that sort before it. Its
# timeout leaves room for that company (the suite alone takes about 45 minutes).
slow=(./internal/e2e/metal/ ./internal/e2e/container/ ./internal/machined/upgrade/ ./internal/e2e/faults/ ./internal/e2e/)
start=$SECONDS
go test -count=1 -race -shuffle=on -timeout 75m -json "$@" "${slow[@]}" ./... | tee _out/test.json | _out/testcheck
echo "hack/test.sh: go test took $((SECONDS - start)) s"
# The clock-jump fault sets the host's clock, so it runs alone, after every other package, and
# only as root (internal/e2e/faults/clock_test.go).
if [ "$(id -u)" = 0 ]; then
  start=$SECONDS
  FAULTS_CLOCK_JUMP=1 go test -count=1 -json -run TestClockJump "$@" ./internal/e2e/faults/ | _out/testcheck
  echo "hack/test.sh: the clock jump took $((SECONDS - start)) s"
fi
# Every fuzz target for a bounded time (hack/fuzz.sh: 30 s each, FuzzApplyConfig 90 s).
step fuzz ./hack/fuzz.sh
