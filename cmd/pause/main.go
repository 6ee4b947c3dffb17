// Command pause is the pod sandbox's process (the registry.k8s.io/pause image): it holds the
// pod's namespaces open, reaps the children it inherits as the pod's PID 1 when the pod shares
// its process namespace, and exits 0 on SIGINT or SIGTERM. It does nothing else, so it is a
// few lines of Go instead of upstream's C program.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause (talos-go)")

		return
	}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)

	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			fmt.Fprintf(os.Stderr, "pause: shutting down, got signal %v\n", sig)
			os.Exit(0)
		}

		reap()
	}
}

// reap collects every exited child: one SIGCHLD may stand for several.
func reap() {
	for {
		var status syscall.WaitStatus

		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
