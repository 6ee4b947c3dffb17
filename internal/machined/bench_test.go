package machined_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/talos-go/talos/internal/testenv"
)

// BenchmarkBootToAPI measures, per boot of a configured node, the time from process start to
// the first answered Version call on the socket, and the node's RSS once idle.
//
//	go test -run '^$' -bench BootToAPI -benchtime 10x ./internal/machined/
func BenchmarkBootToAPI(b *testing.B) {
	cfg := testenv.Config(b, machinetype.TypeWorker, "127.5.9.2")
	testenv.MachinedBinary(b)

	var totalStart time.Duration

	var rssKB int64

	for i := 0; b.Loop(); i++ {
		addr := fmt.Sprintf("127.5.9.%d", 2+i%200)
		start := time.Now()
		n := testenv.StartNode(b, addr, cfg)

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)

		for {
			if _, err := os.Stat(n.Socket()); err == nil {
				c, err := client.New(ctx, client.WithUnixSocket(n.Socket()), client.WithGRPCDialOptions(grpc.WithTransportCredentials(insecure.NewCredentials())))
				if err == nil {
					_, err = c.Version(ctx)
					c.Close()

					if err == nil {
						break
					}
				}
			}

			if ctx.Err() != nil {
				b.Fatalf("node did not serve: %s", n.Output)
			}

			time.Sleep(time.Millisecond)
		}

		totalStart += time.Since(start)
		cancel()

		time.Sleep(2 * time.Second) // let it settle to idle
		rssKB = max(rssKB, vmRSS(b, n.Cmd.Process.Pid))
		n.Stop(b)
	}

	b.ReportMetric(float64(totalStart.Milliseconds())/float64(b.N), "ms-to-API/op")
	b.ReportMetric(float64(rssKB)/1024, "idle-RSS-MB")
}

func vmRSS(b *testing.B, pid int) int64 {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()

	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return kb
		}
	}

	b.Fatal("no VmRSS")

	return 0
}
