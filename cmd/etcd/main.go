package main

import (
	_ "go.etcd.io/etcd/client/v3"
	_ "go.etcd.io/etcd/server/v3/embed"
	_ "go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {}
