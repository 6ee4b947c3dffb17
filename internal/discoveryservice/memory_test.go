package discoveryservice

import (
	"crypto/rand"
	"encoding/base64"
	"runtime"
	"testing"
	"time"
)

// BenchmarkMemoryPer1000Affiliates reports the heap the server holds for 1,000 affiliates of
// realistic size: 300 bytes of data (a node's encrypted affiliate with KubeSpan), two 16-byte
// encrypted endpoints (IPv4, as discovery-client pads them), in clusters of five nodes, IDs as
// nodes send them (a 44-character cluster ID, a 43-character node ID).
func BenchmarkMemoryPer1000Affiliates(b *testing.B) {
	const perCluster = 5

	var held uint64

	randomID := func(n int) string {
		buf := make([]byte, n)
		rand.Read(buf)

		return base64.StdEncoding.EncodeToString(buf)
	}

	expires := time.Now().Add(30 * time.Minute)

	for b.Loop() {
		var before, after runtime.MemStats

		runtime.GC()
		runtime.ReadMemStats(&before)

		st := newStore(DefaultLimits())

		var clusterID string

		for i := range 1000 {
			if i%perCluster == 0 {
				clusterID = randomID(32)
			}

			data := make([]byte, 300)
			rand.Read(data)

			ep1, ep2 := make([]byte, 16), make([]byte, 16)
			rand.Read(ep1)
			rand.Read(ep2)

			if err := st.update(clusterID, randomID(32)[:43], data, [][]byte{ep1, ep2}, expires); err != nil {
				b.Fatal(err)
			}
		}

		runtime.GC()
		runtime.ReadMemStats(&after)

		held = after.HeapAlloc - before.HeapAlloc

		runtime.KeepAlive(st)
	}

	b.ReportMetric(float64(held), "heap-B/1000-affiliates")
}
