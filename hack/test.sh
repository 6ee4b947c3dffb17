#!/usr/bin/env bash
# The test suite: vet, then every package's tests with the race detector. Integration tests
# start real machined, apid and etcd processes on loopback addresses (127.5.x.y).
set -euo pipefail
cd "$(dirname "$0")/.."

go vet ./...
go test -race -timeout 60m "$@" ./...
