#!/usr/bin/env bash
# Runs golangci-lint at the pinned version (configured in .golangci.yml), installing it into
# $(go env GOPATH)/bin first when that version is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=v2.15.0
bin="$(go env GOPATH)/bin/golangci-lint"

if ! "$bin" version 2>/dev/null | grep -q "version ${VERSION#v} "; then
	echo "installing golangci-lint $VERSION (a few minutes, once)"
	go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$VERSION"
fi

exec "$bin" run "$@" ./...
