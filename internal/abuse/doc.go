// Package abuse is the hostile-client suite (its tests only): real apid, maintenance and trustd
// servers on loopback (127.91.0.0/16) under a zero-window reader, a 10,000-entry node list, an
// HTTP/2 rapid-reset flood, slow clients on the unauthenticated listeners and a 100 MiB log
// tail through another node. Each test asserts that another client is still answered within a
// bound and that the process's memory (VmRSS) grows by less than a generous limit, and logs
// what it measured:
//
//	go test -count=1 -v ./internal/abuse/
package abuse
