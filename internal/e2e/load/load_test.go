// Package load puts one node's apid under load for a bounded time and prints what it held:
// concurrent `logs -f` and `events` streams, a stream of unary calls with their p50/p99
// latency, misbehaving clients (connect and send nothing, handshake and send nothing, streams
// never read), and the RSS, threads, open files and goroutines of apid and machined before,
// during and after.
//
// CI runs a short version (the defaults); the full one:
//
//	nsrun go test -count=1 -v -run TestLoad ./internal/e2e/load/ -load.duration 60s -load.streams 200
package load

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talos-go/talos/internal/provision"
	_ "github.com/talos-go/talos/internal/provision/providers" // the kinds of node
	"github.com/talos-go/talos/internal/runtimestats"
	"github.com/talos-go/talos/internal/testenv"
)

var (
	duration = flag.Duration("load.duration", 8*time.Second, "how long the load runs")
	streams  = flag.Int("load.streams", 40, "concurrent logs -f and events streams (half each)")
	unary    = flag.Int("load.unary", 4, "clients calling Version in a loop")
	conns    = flag.Int("load.conns", 4, "client connections the streams are spread over")
	// maxP99 is far above what a loaded 2-core machine under -race shows (tens of milliseconds):
	// it fails a hang or a pathological slowdown, not a slow machine.
	maxP99 = flag.Duration("load.max-p99", 5*time.Second, "the unary calls' p99 latency that fails the test")
)

const nodeAddr = "127.5.42.2"

func TestLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node and loads it for a while")
	}

	root := t.TempDir()

	c, cfgs, err := provision.Create(context.Background(), provision.Request{
		Name: "load", ControlPlanes: 1, CIDR: netip.MustParsePrefix("127.5.42.0/24"), StateRoot: root,
		Binary: testenv.MachinedBinary(t), Progress: io.Discard,
	})

	t.Cleanup(func() {
		provision.Destroy(root, "load", io.Discard)
		testenv.RemoveBinaries()
	})

	if err != nil {
		t.Fatal(err)
	}

	state := c.Nodes[0].State
	newClient := func() *client.Client {
		cl, err := client.New(context.Background(), client.WithConfig(cfgs.Talosconfig), client.WithEndpoints(nodeAddr))
		if err != nil {
			t.Fatal(err)
		}

		t.Cleanup(func() { cl.Close() })

		return cl
	}

	probe := newClient()
	testenv.WaitFor(t, "apid answers", 90*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()

		_, err := probe.Version(ctx)

		return err
	})

	procs := map[string]int{"machined": c.Nodes[0].PID, "apid": findAPID(t, state)}
	// Where each prints its runtime stats on SIGUSR1 (internal/runtimestats).
	statsLogs := map[string]string{
		"machined": filepath.Join(c.Dir, c.Nodes[0].Name+".log"),
		"apid":     filepath.Join(state, "EPHEMERAL", "log", "apid.log"),
	}

	time.Sleep(2 * time.Second) // let the node settle after boot

	before := readAll(procs)
	goroutinesBefore := goroutinesOf(t, procs, statsLogs)
	goroutinesAfter := make([]map[string]int, 2)

	// Two rounds of the same load: what the second leaves behind next to the first shows growth
	// (Go keeps freed heap a while, so the first round's RSS is the baseline, not the idle one).
	var rounds [2]round

	for i := range rounds {
		rounds[i] = loadRound(t, newClient, cfgs.Talosconfig, procs)
		r := rounds[i]

		t.Logf("round %d: %d streams (logs -f and events) over %d connections, %d unary clients, for %v", i+1, *streams, *conns, *unary, *duration)
		t.Logf("round %d: streams up %d, stream messages %d; unary calls %d: p50 %v p99 %v (%.0f calls/s)", i+1, r.streamsUp, r.streamMsgs,
			len(r.latencies), pct(r.latencies, 50), pct(r.latencies, 99), float64(len(r.latencies))/duration.Seconds())
		t.Logf("round %d: errors %v", i+1, r.errs)

		if len(r.errs) > 0 {
			t.Errorf("round %d: unexpected errors under load: %v", i+1, r.errs)
		}

		if len(r.latencies) == 0 || r.streamsUp != int64(*streams) {
			t.Fatalf("round %d: the load did not run: %d unary calls, %d of %d streams up", i+1, len(r.latencies), r.streamsUp, *streams)
		}

		if p99 := pct(r.latencies, 99); p99 > *maxP99 {
			t.Errorf("round %d: unary p99 latency %v, over %v", i+1, p99, *maxP99)
		}

		// Calls did not stall: at least one per client per second (thousands run meanwhile).
		if minCalls := *unary * int(duration.Seconds()); len(r.latencies) < minCalls {
			t.Errorf("round %d: %d unary calls in %v from %d clients, want at least %d", i+1, len(r.latencies), *duration, *unary, minCalls)
		}

		// Every stream delivered its history: the tail of machined's log or of the events.
		if r.streamMsgs < int64(*streams) {
			t.Errorf("round %d: %d stream messages over %d streams, want at least one each", i+1, r.streamMsgs, *streams)
		}

		silentDeadline := time.Now().Add(30 * time.Second)

		for _, c := range r.silent {
			c.SetReadDeadline(silentDeadline)

			if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
				t.Errorf("a client that sends nothing is kept open by apid (read: %v)", err)
			}
		}

		// Once the load stops, apid holds no connection or descriptor of it.
		testenv.WaitFor(t, "apid's open files back to where they were", 30*time.Second, func() error {
			if u := readUsage(procs["apid"]); u.fds > before["apid"].fds+2 {
				return fmt.Errorf("apid holds %d open files, %d before the load", u.fds, before["apid"].fds)
			}

			return nil
		})

		// Nor goroutines: the count goes back to where it was before the load (a little slack
		// for the node's own background work).
		testenv.WaitFor(t, "apid's and machined's goroutines back to where they were", 30*time.Second, func() error {
			goroutinesAfter[i] = goroutinesOf(t, procs, statsLogs)

			for name, n := range goroutinesAfter[i] {
				if n > goroutinesBefore[name]+goroutineSlack {
					return fmt.Errorf("%s runs %d goroutines, %d before the load", name, n, goroutinesBefore[name])
				}
			}

			return nil
		})

		time.Sleep(2 * time.Second)
		rounds[i].after = readAll(procs)
	}

	for _, name := range []string{"apid", "machined"} {
		b, a1, a2 := before[name], rounds[0].after[name], rounds[1].after[name]
		t.Logf("%-8s before %v | peak %v | after round 1 %v | after round 2 %v | RSS round 2/round 1 %.2f",
			name, b, rounds[0].peak[name].max(rounds[1].peak[name]), a1, a2, float64(a2.rssKB)/float64(a1.rssKB))
		t.Logf("%-8s goroutines before %d | after round 1 %d | after round 2 %d",
			name, goroutinesBefore[name], goroutinesAfter[0][name], goroutinesAfter[1][name])
	}
}

// round is what one round of load measured.
type round struct {
	streamsUp, streamMsgs int64
	latencies             []time.Duration
	errs                  map[string]int
	peak, after           map[string]usage
	silent                []net.Conn // clients that sent nothing: apid must have closed them
}

// loadRound runs the load for -load.duration on new client connections and closes them after.
func loadRound(t *testing.T, newClient func() *client.Client, cfg *clientconfig.Config, procs map[string]int) round {
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()

	var (
		wg                    sync.WaitGroup
		streamMsgs, streamsUp atomic.Int64
		mu                    sync.Mutex
		r                     = round{errs: map[string]int{}, peak: map[string]usage{}}
	)

	// gRPC fails a call whose deadline has passed before the context's own timer fires: the
	// end of the run is the deadline, not ctx.Err().
	deadline, _ := ctx.Deadline()
	over := func() bool { return !time.Now().Before(deadline) || ctx.Err() != nil }

	countErr := func(what string, err error) {
		// The deadline travels to the server (grpc-timeout), which may end a follow stream
		// cleanly just before the client's own timer fires: io.EOF then is the end of the run too.
		if err == nil || over() && (status.Code(err) == codes.Canceled || status.Code(err) == codes.DeadlineExceeded ||
			errors.Is(err, context.Canceled) || errors.Is(err, io.EOF)) {
			return // the end of the run
		}

		mu.Lock()
		key := what + ": " + status.Code(err).String()
		if r.errs[key] == 0 {
			t.Logf("first %s error: %v (over: %v)", key, err, over())
		}

		r.errs[key]++
		mu.Unlock()
	}

	clients := make([]*client.Client, *conns)
	for i := range clients {
		clients[i] = newClient()
	}

	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()

	// Streams: half logs -f machined, half events, spread over the connections.
	for i := range *streams {
		cl := clients[i%len(clients)]

		wg.Add(1)

		go func() {
			defer wg.Done()

			var recv func() error

			if i%2 == 0 {
				s, err := cl.MachineClient.Logs(ctx, &machine.LogsRequest{Namespace: "system", Id: "machined", Follow: true, TailLines: 10})
				if err != nil {
					countErr("logs open", err)

					return
				}

				recv = func() error { _, err := s.Recv(); return err }
			} else {
				s, err := cl.MachineClient.Events(ctx, &machine.EventsRequest{TailEvents: 5})
				if err != nil {
					countErr("events open", err)

					return
				}

				recv = func() error { _, err := s.Recv(); return err }
			}

			streamsUp.Add(1)

			for {
				if err := recv(); err != nil {
					countErr(map[bool]string{true: "logs", false: "events"}[i%2 == 0], err)

					return
				}

				streamMsgs.Add(1)
			}
		}()
	}

	// Unary calls, each timed.
	for i := range *unary {
		cl := clients[i%len(clients)]

		wg.Add(1)

		go func() {
			defer wg.Done()

			for !over() {
				start := time.Now()

				if _, err := cl.MachineClient.Version(ctx, &emptypb.Empty{}); err != nil {
					countErr("version", err)

					continue
				}

				mu.Lock()
				r.latencies = append(r.latencies, time.Since(start))
				mu.Unlock()
			}
		}()
	}

	// Misbehaving clients: never read their streams, or connect and say nothing.
	stalled := stallStreams(t, ctx, newClient(), 20)
	r.silent = append(silentConns(t, 10), silentTLSConns(t, cfg, 10)...)

	// Sample apid and machined once a second while the load runs.
	for tick := time.NewTicker(time.Second); ctx.Err() == nil; {
		select {
		case <-ctx.Done():
		case <-tick.C:
			for name, u := range readAll(procs) {
				r.peak[name] = r.peak[name].max(u)
			}
		}
	}

	wg.Wait()
	stalled()

	r.streamsUp, r.streamMsgs = streamsUp.Load(), streamMsgs.Load()
	slices.Sort(r.latencies)

	return r
}

func readAll(procs map[string]int) map[string]usage {
	u := map[string]usage{}
	for name, pid := range procs {
		u[name] = readUsage(pid)
	}

	return u
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}

	return sorted[min(len(sorted)-1, len(sorted)*p/100)].Round(10 * time.Microsecond)
}

func isTimeout(err error) bool {
	var ne net.Error

	return errors.As(err, &ne) && ne.Timeout()
}

// findAPID returns the pid of the apid that the node with this state folder runs.
func findAPID(t *testing.T, state string) int {
	t.Helper()

	var pid int

	testenv.WaitFor(t, "apid process", 30*time.Second, func() error {
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			data, _ := os.ReadFile(p)
			argv := strings.Split(string(data), "\x00")

			if len(argv) > 1 && argv[1] == "apid" && strings.Contains(string(data), state) {
				pid, _ = strconv.Atoi(filepath.Base(filepath.Dir(p)))

				return nil
			}
		}

		return errors.New("not found")
	})

	return pid
}

// goroutineSlack is how many more goroutines than before the load a process may run once the
// load stopped: the node's own work (controllers, health checks) comes and goes.
const goroutineSlack = 15

// goroutinesOf asks each process for its runtime stats (SIGUSR1) and reads its goroutine count
// from the line it prints in its log.
func goroutinesOf(t *testing.T, procs map[string]int, logs map[string]string) map[string]int {
	t.Helper()

	out := map[string]int{}

	for name, pid := range procs {
		offset := int64(0)
		if fi, err := os.Stat(logs[name]); err == nil {
			offset = fi.Size()
		}

		if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
			t.Fatalf("%s: %v", name, err)
		}

		testenv.WaitFor(t, name+"'s runtime stats", 10*time.Second, func() error {
			data, err := os.ReadFile(logs[name])
			if err != nil {
				return err
			}

			for _, line := range strings.Split(string(data[min(offset, int64(len(data))):]), "\n") {
				_, stats, ok := strings.Cut(line, runtimestats.Line)
				if !ok {
					continue
				}

				for _, f := range strings.Fields(stats) {
					if v, ok := strings.CutPrefix(f, "goroutines="); ok {
						out[name], err = strconv.Atoi(v)

						return err
					}
				}
			}

			return fmt.Errorf("no %q line in %s yet", runtimestats.Line, logs[name])
		})
	}

	return out
}

// usage is what a process holds: resident memory, threads and open files.
type usage struct {
	rssKB, threads, fds int
}

func (u usage) String() string {
	return fmt.Sprintf("RSS %5.1f MiB threads %3d fds %4d", float64(u.rssKB)/1024, u.threads, u.fds)
}

func (u usage) max(o usage) usage {
	return usage{max(u.rssKB, o.rssKB), max(u.threads, o.threads), max(u.fds, o.fds)}
}

func readUsage(pid int) usage {
	var u usage

	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}

		switch f[0] {
		case "VmRSS:":
			u.rssKB, _ = strconv.Atoi(f[1])
		case "Threads:":
			u.threads, _ = strconv.Atoi(f[1])
		}
	}

	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	u.fds = len(fds)

	return u
}
