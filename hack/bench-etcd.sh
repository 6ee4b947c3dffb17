#!/usr/bin/env bash
# Measures etcd bootstrap times with real etcd processes on loopback addresses:
#   1. library level: Bootstrap on one of three waiting members -> three healthy voting members
#      (internal/etcd BenchmarkBootstrapThreeMembers; join retry 300ms);
#   2. through machined: three machined control planes, the Bootstrap API on the first ->
#      three voting members and a healthy etcd service on each (production settings).
# The etcd command is built once into $ETCD_BIN (default /tmp/talos-etcd/etcd) and reused.
set -euo pipefail
cd "$(dirname "$0")/.."

ETCD_BIN=${ETCD_BIN:-/tmp/talos-etcd/etcd}
COUNT=${COUNT:-5}

if [ ! -x "$ETCD_BIN" ]; then
	mkdir -p "$(dirname "$ETCD_BIN")"
	go build -o "$ETCD_BIN" ./cmd/etcd
fi

export TALOS_ETCD_BINARY=$ETCD_BIN

echo "== library: bootstrap to three healthy voting members (${COUNT} clusters)"
go test ./internal/etcd/ -run '^$' -bench BootstrapThreeMembers -benchtime "${COUNT}x" -count=1 -timeout 15m |
	grep -E 'Benchmark|s/cluster'

echo "== through machined: bootstrap to three healthy voting members"
go test ./internal/machined/server/ -run '^TestEtcdThroughMachined$' -v -count=1 -timeout 10m |
	grep -E 'bootstrap to three|--- (PASS|FAIL)'
