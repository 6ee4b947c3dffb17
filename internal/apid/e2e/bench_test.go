package e2e

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talos-go/talos/internal/testenv"
)

// relayEnv makes the test binary a bare byte relay: it accepts on one unix socket and copies
// bytes both ways to another. No TLS, no HTTP/2 parsing, no routing: the cheapest process hop.
const relayEnv = "APID_E2E_RELAY"

func init() {
	if spec := os.Getenv(relayEnv); spec != "" {
		os.Exit(runRelay(spec))
	}
}

func runRelay(spec string) int {
	listen, target, _ := strings.Cut(spec, "|")

	l, err := net.Listen("unix", listen)
	if err != nil {
		return 1
	}

	for {
		in, err := l.Accept()
		if err != nil {
			return 1
		}

		out, err := net.Dial("unix", target)
		if err != nil {
			in.Close()

			continue
		}

		go func() { io.Copy(out, in) }()
		go func() { io.Copy(in, out) }()
	}
}

// BenchmarkVersionRealMachined measures, interleaved in one run, Version directly on the
// control plane's machined socket, through a bare byte-relay process and through apid (goal:
// apid/direct at most 1.5 at the median). The relay is the floor of any extra process hop on
// this machine: what a gateway costs before it does TLS, HTTP/2 or authorization.
func BenchmarkVersionRealMachined(b *testing.B) {
	cl := getCluster(b)

	sock := cl.c.Nodes[0].State + "/system/run/machined/machined.sock"
	relaySock := filepath.Join(b.TempDir(), "relay.sock")

	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), relayEnv+"="+relaySock+"|"+sock)

	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}

	b.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})

	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(relaySock); err == nil {
			break
		}

		if time.Now().After(deadline) {
			b.Fatal("relay did not start")
		}
	}

	apidConn, err := grpc.NewClient(cl.addrs[0]+":50000", grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: cl.pool(), Certificates: []tls.Certificate{cl.roleCert(b, "os:reader")},
	})))
	if err != nil {
		b.Fatal(err)
	}

	b.Cleanup(func() { apidConn.Close() })

	unixClient := func(path string) machine.MachineServiceClient {
		conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}

		b.Cleanup(func() { conn.Close() })

		return machine.NewMachineServiceClient(conn)
	}

	clients := map[string]machine.MachineServiceClient{
		"direct": unixClient(sock),
		"relay":  unixClient(relaySock),
		"apid":   machine.NewMachineServiceClient(apidConn),
	}
	order := []string{"direct", "relay", "apid"}
	ctx := context.Background()

	apidPID, err := testenv.FindProcess("apid", cl.addrs[0]+":50000")
	if err != nil {
		b.Fatal(err)
	}

	call := func(c machine.MachineServiceClient) time.Duration {
		start := time.Now()

		if _, err := c.Version(ctx, &emptypb.Empty{}); err != nil {
			b.Fatal(err)
		}

		return time.Since(start)
	}

	// apid's own cost: CPU and context switches of its threads, read around each apid call.
	var apidSched testenv.Sched

	measured := func(c machine.MachineServiceClient) time.Duration {
		before, err := testenv.ProcessSched(apidPID)
		if err != nil {
			b.Fatal(err)
		}

		d := call(c)

		after, err := testenv.ProcessSched(apidPID)
		if err != nil {
			b.Fatal(err)
		}

		delta := after.Sub(before)
		apidSched.CPU += delta.CPU
		apidSched.Slices += delta.Slices

		return d
	}

	for range 100 {
		for _, k := range order {
			call(clients[k])
		}
	}

	samples := map[string][]time.Duration{}

	for b.Loop() {
		for _, k := range order {
			if k == "apid" {
				samples[k] = append(samples[k], measured(clients[k]))
			} else {
				samples[k] = append(samples[k], call(clients[k]))
			}
		}
	}

	med := map[string]time.Duration{}

	for _, k := range order {
		s := slices.Clone(samples[k])
		slices.Sort(s)
		med[k] = s[len(s)/2]
		b.ReportMetric(float64(med[k].Microseconds()), k+"-median-µs")
	}

	b.ReportMetric(float64(med["relay"])/float64(med["direct"]), "relay/direct")
	b.ReportMetric(float64(med["apid"])/float64(med["direct"]), "apid/direct")

	n := float64(len(samples["apid"]))
	b.ReportMetric(float64(apidSched.CPU.Microseconds())/n, "apid-cpu-µs/call")
	b.ReportMetric(float64(apidSched.Slices)/n, "apid-switches/call")
}
