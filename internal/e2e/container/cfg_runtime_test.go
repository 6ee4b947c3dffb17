package container

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"

	"github.com/talos-go/talos/internal/eventsink"
	"github.com/talos-go/talos/internal/testenv"
)

// bridgeGateway is the host's address on the cluster bridge: what the nodes reach the suite on.
const bridgeGateway = "10.5.0.1"

// A KmsgLogConfig document sends the kernel log (the host's, as a container node reads it) to
// a TCP listener as upstream's JSON lines; when the listener goes and comes back, the node
// connects again and goes on.
func TestKmsgLogConfigSendsKernelLog(t *testing.T) {
	ln, err := net.Listen("tcp", bridgeGateway+":0")
	if err != nil {
		t.Fatal(err)
	}

	port := ln.Addr().(*net.TCPAddr).Port
	lines := make(chan map[string]any, 4096)

	var (
		mu      sync.Mutex
		conns   []net.Conn
		accepts int
	)

	serve := func(ln net.Listener) {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}

			mu.Lock()
			conns, accepts = append(conns, c), accepts+1
			mu.Unlock()

			go func() {
				defer c.Close()

				sc := bufio.NewScanner(c)
				sc.Buffer(make([]byte, 64*1024), 1<<20)

				for sc.Scan() {
					var m map[string]any
					if json.Unmarshal(sc.Bytes(), &m) != nil {
						m = map[string]any{"not-json": sc.Text()}
					}

					// Only the test's marks (and what is not JSON) are kept: the node sends
					// the whole kernel log first.
					if _, bad := m["not-json"]; !bad && !strings.HasPrefix(fmt.Sprint(m["msg"]), "talos-go e2e kmsg") {
						continue
					}

					select {
					case lines <- m:
					default:
					}
				}
			}()
		}
	}

	go serve(ln)

	must(t, "-n", w, "patch", "machineconfig", "--mode", "no-reboot", "-p",
		fmt.Sprintf("apiVersion: v1alpha1\nkind: KmsgLogConfig\nname: e2e-kmsg\nurl: tcp://%s:%d\n", bridgeGateway, port))

	t.Cleanup(func() {
		_, errOut, code := talosctl(t, "-n", w, "patch", "machineconfig", "--mode", "no-reboot", "-p",
			"apiVersion: v1alpha1\nkind: KmsgLogConfig\nname: e2e-kmsg\n$patch: delete\n")
		if code != 0 {
			t.Logf("removing the KmsgLogConfig: %s", errOut)
		}
	})

	waitMark := func(what string) map[string]any {
		mark := fmt.Sprintf("talos-go e2e kmsg %s %d", what, time.Now().UnixNano())

		var got map[string]any

		testenv.WaitFor(t, "the kernel log line "+mark, 90*time.Second, func() error {
			// Written again each try: the node may connect after the first write.
			if err := os.WriteFile("/dev/kmsg", []byte("<4>"+mark+"\n"), 0); err != nil {
				t.Fatalf("writing /dev/kmsg: %v", err)
			}

			deadline := time.After(3 * time.Second)

			for {
				select {
				case m := <-lines:
					if nj, ok := m["not-json"]; ok {
						t.Fatalf("a line that is not JSON: %v", nj)
					}

					if strings.TrimSpace(fmt.Sprint(m["msg"])) == mark { // the kernel may keep the write's newline
						got = m

						return nil
					}
				case <-deadline:
					return fmt.Errorf("not seen yet")
				}
			}
		})

		return got
	}

	m := waitMark("first")

	// Upstream's fields: the priority we wrote (4, warning) as talos-level warn.
	for _, k := range []string{"talos-time", "facility", "seq", "clock"} {
		if _, ok := m[k]; !ok {
			t.Errorf("field %s missing in %v", k, m)
		}
	}

	if m["talos-level"] != "warn" || m["priority"] != "warning" || m["facility"] != "user" {
		t.Errorf("level, priority, facility: %v %v %v; want warn, warning, user", m["talos-level"], m["priority"], m["facility"])
	}

	if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(m["talos-time"])); err != nil {
		t.Errorf("talos-time: %v", err)
	}

	// The sink goes away (listener and connections closed), then comes back on the same port.
	ln.Close()

	mu.Lock()
	for _, c := range conns {
		c.Close()
	}
	mu.Unlock()

	ln2 := closeConnsAndRelisten(t, port)

	go serve(ln2)

	waitMark("after-reconnect")

	mu.Lock()
	defer mu.Unlock()

	if accepts < 2 {
		t.Fatalf("%d connections from the node; want a second one after the sink came back", accepts)
	}
}

// closeConnsAndRelisten listens on port again after a while without a sink (the node's old
// connection breaks on its next write and it dials again).
func closeConnsAndRelisten(t *testing.T, port int) net.Listener {
	t.Helper()

	time.Sleep(2 * time.Second) // the node's writes fail in the meantime

	ln, err := net.Listen("tcp", fmt.Sprintf("%s:%d", bridgeGateway, port))
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { ln.Close() })

	return ln
}

// An EventSinkConfig document sends the node's events to a gRPC sink serving upstream's
// EventSinkService: the boot's events the bus still holds arrive, each with its ID and a
// machine API payload.
func TestEventSinkConfigSendsEvents(t *testing.T) {
	ln, err := net.Listen("tcp", bridgeGateway+":0")
	if err != nil {
		t.Fatal(err)
	}

	var (
		mu  sync.Mutex
		got []eventsink.Event
	)

	srv := grpc.NewServer()
	eventsink.Register(srv, func(_ context.Context, ev eventsink.Event) error {
		mu.Lock()
		got = append(got, ev)
		mu.Unlock()

		return nil
	})

	go srv.Serve(ln) // ends with Stop

	defer srv.Stop()

	must(t, "-n", w, "patch", "machineconfig", "--mode", "no-reboot", "-p",
		fmt.Sprintf("apiVersion: v1alpha1\nkind: EventSinkConfig\nendpoint: %s\n", ln.Addr()))

	t.Cleanup(func() {
		_, errOut, code := talosctl(t, "-n", w, "patch", "machineconfig", "--mode", "no-reboot", "-p",
			"apiVersion: v1alpha1\nkind: EventSinkConfig\n$patch: delete\n")
		if code != 0 {
			t.Logf("removing the EventSinkConfig: %s", errOut)
		}
	})

	testenv.WaitFor(t, "the boot's sequence events at the sink", 60*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()

		for _, ev := range got {
			payload, err := ev.Data.UnmarshalNew()
			if err != nil {
				return fmt.Errorf("event %s: payload %s: %w", ev.ID, ev.Data.GetTypeUrl(), err)
			}

			if ev.ID == "" {
				return fmt.Errorf("an event without an ID: %v", payload)
			}

			if seq, ok := payload.(*machine.SequenceEvent); ok && seq.GetSequence() != "" {
				return nil
			}
		}

		return fmt.Errorf("%d events, no SequenceEvent yet", len(got))
	})

	// In order: IDs only grow.
	mu.Lock()
	defer mu.Unlock()

	for i := 1; i < len(got); i++ {
		if got[i].ID <= got[i-1].ID {
			t.Fatalf("event %d's ID %s after %s", i, got[i].ID, got[i-1].ID)
		}
	}

}
