package apid

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/emptypb"
)

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)

	return s[len(s)/2]
}

// BenchmarkVersionThroughAPID measures Version directly on the machined socket and through
// apid (mTLS, authz, proxy), interleaved in one run, and reports both medians and their ratio
// (goal: ratio at most 1.5).
func BenchmarkVersionThroughAPID(b *testing.B) {
	ca := newCA(b)
	n := startNode(b, ca)

	direct, err := grpc.NewClient("unix://"+n.server.opts.MachinedSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close()

	dc := machine.NewMachineServiceClient(direct)
	ac := machine.NewMachineServiceClient(dial(b, ca, n.addr, ca.roleCert(b, "os:reader")))
	ctx := context.Background()

	call := func(c machine.MachineServiceClient) time.Duration {
		start := time.Now()

		if _, err := c.Version(ctx, &emptypb.Empty{}); err != nil {
			b.Fatal(err)
		}

		return time.Since(start)
	}

	for range 100 { // warm both connections
		call(dc)
		call(ac)
	}

	var viaDirect, viaAPID []time.Duration

	b.ResetTimer()

	for b.Loop() {
		viaDirect = append(viaDirect, call(dc))
		viaAPID = append(viaAPID, call(ac))
	}

	md, ma := median(viaDirect), median(viaAPID)

	b.ReportMetric(float64(md.Microseconds()), "direct-median-µs")
	b.ReportMetric(float64(ma.Microseconds()), "apid-median-µs")
	b.ReportMetric(float64(ma)/float64(md), "ratio")
}

// BenchmarkFanOutVersion measures warm Version fanned out by one endpoint to 1, 10 and 50
// other nodes (each an apid with its backend on its own loopback address), interleaved in one
// run, and reports each median and its ratio to one node (goal: 50 nodes within 4x).
func BenchmarkFanOutVersion(b *testing.B) {
	ca := newCA(b)
	entry := startNode(b, ca)

	var others []string

	for range 50 {
		others = append(others, startNode(b, ca).addr)
	}

	c := machine.NewMachineServiceClient(dial(b, ca, entry.addr, ca.roleCert(b, "os:reader")))
	sizes := []int{1, 10, 50}

	call := func(k int) time.Duration {
		ctx := withNodes(context.Background(), others[:k]...)
		start := time.Now()

		resp, err := c.Version(ctx, &emptypb.Empty{})
		if err != nil {
			b.Fatal(err)
		}

		elapsed := time.Since(start)

		if len(resp.Messages) != k {
			b.Fatalf("want %d messages, got %d", k, len(resp.Messages))
		}

		for _, m := range resp.Messages {
			if m.GetMetadata().GetError() != "" {
				b.Fatalf("node error: %s", m.GetMetadata().GetError())
			}
		}

		return elapsed
	}

	for range 20 { // warm: every pooled connection is up
		for _, k := range sizes {
			call(k)
		}
	}

	samples := map[int][]time.Duration{}

	b.ResetTimer()

	for b.Loop() {
		for _, k := range sizes {
			samples[k] = append(samples[k], call(k))
		}
	}

	one := median(samples[1])

	for _, k := range sizes {
		m := median(samples[k])
		b.ReportMetric(float64(m.Microseconds()), fmt.Sprintf("n%d-median-µs", k))

		if k > 1 {
			b.ReportMetric(float64(m)/float64(one), fmt.Sprintf("n%d/n1", k))
		}
	}
}

// BenchmarkFanOutOneNode is the single-node fan-out alone (no larger fan-outs in between).
func BenchmarkFanOutOneNode(b *testing.B) {
	ca := newCA(b)
	entry, other := startNode(b, ca), startNode(b, ca)
	c := machine.NewMachineServiceClient(dial(b, ca, entry.addr, ca.roleCert(b, "os:reader")))
	ctx := withNodes(context.Background(), other.addr)
	if os.Getenv("APID_BENCH_NODE") != "" {
		ctx = metadata.AppendToOutgoingContext(context.Background(), "node", other.addr)
	}

	for range 100 {
		if _, err := c.Version(ctx, &emptypb.Empty{}); err != nil {
			b.Fatal(err)
		}
	}

	var d []time.Duration

	for b.Loop() {
		start := time.Now()

		if _, err := c.Version(ctx, &emptypb.Empty{}); err != nil {
			b.Fatal(err)
		}

		d = append(d, time.Since(start))
	}

	b.ReportMetric(float64(median(d).Microseconds()), "median-µs")
}

// processCPU is the CPU time used so far by every thread of a process, from schedstat (ns).
func processCPU(b *testing.B, pid int) time.Duration {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		b.Fatal(err)
	}

	var total int64

	for _, task := range tasks {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, task.Name()))
		if err != nil {
			continue // thread ended
		}

		var ns int64
		if _, err = fmt.Sscan(string(data), &ns); err == nil {
			total += ns
		}
	}

	return time.Duration(total)
}

// BenchmarkFanOutEntryProcess runs the endpoint apid as its own process and the 50 other
// nodes in the benchmark process, and reports, for fan-out to 1, 10 and 50 nodes, the wall
// median and the CPU the endpoint process spends per call: what one gateway pays per node,
// apart from the nodes it calls (which on this machine share the same cores).
func BenchmarkFanOutEntryProcess(b *testing.B) {
	ca := newCA(b)
	f := &fakeMachined{name: "entry"}
	sock := startFakeMachined(b, f)

	l := listenNode(b)
	addr := l.Addr().String()
	host, _, _ := net.SplitHostPort(addr)
	l.Close()

	dir := b.TempDir()
	writeCerts(b, ca, dir, host)

	cmd := exec.Command(os.Args[0], "--listen", addr, "--certs", dir, "--socket", sock)
	cmd.Env = append(os.Environ(), "APID_TEST_PROCESS=1")

	if g := os.Getenv("APID_ENTRY_GOMAXPROCS"); g != "" {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+g)
	}

	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}

	exited := make(chan struct{})

	go func() {
		cmd.Wait()
		close(exited)
	}()

	b.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-exited
	})

	var others []string

	for range 50 {
		others = append(others, startNode(b, ca).addr)
	}

	c := machine.NewMachineServiceClient(dial(b, ca, host, ca.roleCert(b, "os:reader")))

	call := func(k int) time.Duration {
		ctx, cancel := context.WithTimeout(withNodes(context.Background(), others[:k]...), 10*time.Second)
		defer cancel()

		start := time.Now()

		resp, err := c.Version(ctx, &emptypb.Empty{}, grpc.WaitForReady(true))
		if err != nil {
			b.Fatal(err)
		}

		elapsed := time.Since(start)

		if len(resp.Messages) != k || resp.Messages[k-1].GetMetadata().GetError() != "" {
			b.Fatalf("bad fan-out reply: %v", resp)
		}

		return elapsed
	}

	sizes := []int{1, 10, 50}

	for range 20 {
		for _, k := range sizes {
			call(k)
		}
	}

	const batch = 20

	wall := map[int][]time.Duration{}
	cpu := map[int]time.Duration{}
	calls := map[int]int{}

	b.ResetTimer()

	for b.Loop() {
		for _, k := range sizes {
			before := processCPU(b, cmd.Process.Pid)

			for range batch {
				wall[k] = append(wall[k], call(k))
			}

			cpu[k] += processCPU(b, cmd.Process.Pid) - before
			calls[k] += batch
		}
	}

	one := median(wall[1])
	oneCPU := cpu[1] / time.Duration(calls[1])

	for _, k := range sizes {
		perCall := cpu[k] / time.Duration(calls[k])

		b.ReportMetric(float64(median(wall[k]).Microseconds()), fmt.Sprintf("n%d-median-µs", k))
		b.ReportMetric(float64(perCall.Microseconds()), fmt.Sprintf("n%d-endpoint-cpu-µs", k))

		if k > 1 {
			b.ReportMetric(float64(median(wall[k]))/float64(one), fmt.Sprintf("n%d/n1", k))
			b.ReportMetric(float64(perCall)/float64(oneCPU), fmt.Sprintf("n%d/n1-endpoint-cpu", k))
		}
	}
}
