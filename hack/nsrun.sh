#!/bin/sh
# Runs a command (as root) in a fresh network namespace with only loopback up, so tests from several
# work trees can bind the same 127.5.x.y addresses without colliding.
exec unshare -n sh -c 'ip link set lo up && exec "$@"' sh "$@"
