package apid

import (
	"context"
	"fmt"
	"os"
	"slices"
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
	defer direct.Close() //nolint:errcheck

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
