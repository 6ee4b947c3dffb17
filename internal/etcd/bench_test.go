package etcd

import (
	"context"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// BenchmarkBootstrapThreeMembers measures the time from Bootstrap on one of three waiting
// control planes to three healthy voting members (reported as s/cluster). Run with
// hack/bench-etcd.sh or `go test -run ^$ -bench BootstrapThree -benchtime 3x ./internal/etcd`.
func BenchmarkBootstrapThreeMembers(b *testing.B) {
	caCert, caKey, err := testCA()
	if err != nil {
		b.Fatal(err)
	}

	var total time.Duration

	for i := 0; i < b.N; i++ {
		b.StopTimer()

		c := newTestCluster(b, 3, caCert, caKey)
		for _, n := range c.nodes {
			n.start()
		}

		// Let every node reach its join loop first, as on a booted cluster.
		time.Sleep(500 * time.Millisecond)

		b.StartTimer()

		start := time.Now()

		if err := c.nodes[0].m.Bootstrap(context.Background(), BootstrapOptions{}); err != nil {
			b.Fatal(err)
		}

		testenv.WaitFor(b, "three healthy voting members", 2*time.Minute, func() error { return c.votersHealthy(c.nodes[0], 3) })

		total += time.Since(start)

		b.StopTimer()

		for _, n := range c.nodes {
			n.stop()
		}
	}

	b.ReportMetric(total.Seconds()/float64(b.N), "s/cluster")
}
