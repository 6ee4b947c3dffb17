// Command etcd is the real etcd server, built from etcd's own Go module (go.etcd.io/etcd/server/v3)
// at the version pinned in go.mod. machined runs it as the "etcd" service on control planes; it
// looks for this binary next to its own executable, then on PATH.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
