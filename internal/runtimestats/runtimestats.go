// Package runtimestats prints a process's goroutine count and heap on SIGUSR1: the load test
// reads them from apid's and machined's logs to show that nothing grows once a load stops.
package runtimestats

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"
)

// Line is the start of what OnSignal prints.
const Line = "runtime stats:"

// OnSignal writes one line of runtime stats to w on each SIGUSR1 until ctx ends.
func OnSignal(ctx context.Context, w io.Writer) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)

	go func() {
		defer signal.Stop(sig)

		for {
			select {
			case <-ctx.Done():
				return
			case <-sig:
				Write(w)
			}
		}
	}()
}

// Write writes the stats line: goroutines, heap in use and OS threads created.
func Write(w io.Writer) {
	var m runtime.MemStats

	runtime.ReadMemStats(&m)

	threads, _ := runtime.ThreadCreateProfile(nil)

	fmt.Fprintf(w, "%s goroutines=%d heap_inuse_kib=%d threads_created=%d\n", Line, runtime.NumGoroutine(), m.HeapInuse/1024, threads)
}
