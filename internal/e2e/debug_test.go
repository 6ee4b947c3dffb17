package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// `cluster create --with-debug` sets the configs' debug: the node's services' logs go to its
// console (a process node's console is its log in the cluster folder) as well as to their own,
// each line with the service's name. --endpoint makes the talosconfig's only endpoint the one
// given (here the second control plane, which proxies to the first).
func TestClusterCreateWithDebugAndEndpoint(t *testing.T) {
	h := t.TempDir()
	c := testenv.CLI{Binary: filepath.Join(binDir, "talosctl"), Home: h, Timeout: 3 * time.Minute}

	// machine.logging.destinations: every log line as JSON to a TCP receiver the test runs.
	received := receiveJSONLogs(t)

	t.Cleanup(func() { c.Run(t, "cluster", "destroy", "--name", "debug") })
	c.Must(t, "cluster", "create", "--name", "debug", "--controlplanes", "2", "--workers", "0",
		"--cidr", "127.5.46.0/24", "--with-debug", "--endpoint", "127.5.46.3", "--wait-timeout", "3m",
		"--config-patch", fmt.Sprintf(`{"machine": {"logging": {"destinations": [{"endpoint": "tcp://%s", "format": "json_lines", "extraTags": {"test": "e2e"}}]}}}`, received.addr))

	testenv.WaitFor(t, "apid's and machined's lines at the logging destination", time.Minute, func() error {
		for _, service := range []string{"apid", "machined"} {
			if !received.has(func(m map[string]string) bool {
				return m["talos-service"] == service && m["test"] == "e2e" && m["talos-level"] != "" && m["talos-time"] != "" && m["msg"] != ""
			}) {
				return fmt.Errorf("no message from %s yet", service)
			}
		}

		return nil
	})

	if out := c.Must(t, "config", "info"); !regexp.MustCompile(`(?m)^Endpoints:\s+127\.5\.46\.3\s*$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^Nodes:\s+127\.5\.46\.2\s*$`).MatchString(out) {
		t.Errorf("config info: the endpoint is not the one given, or the node not the first control plane:\n%s", out)
	}

	if out := c.Must(t, "get", "hostname"); !strings.Contains(out, "debug-controlplane-1") {
		t.Errorf("through the endpoint to the first control plane: %s", out)
	}

	// A change of the destinations takes effect without a reboot.
	live := receiveJSONLogs(t)
	c.Must(t, "-n", "127.5.46.2", "patch", "machineconfig", "--mode", "no-reboot", "--patch",
		fmt.Sprintf(`[{"op": "replace", "path": "/machine/logging/destinations/0/endpoint", "value": "tcp://%s"}]`, live.addr))
	c.Must(t, "-n", "127.5.46.2", "logs", "apid") // something to log: apid serves the call

	testenv.WaitFor(t, "the node's lines at the new destination", time.Minute, func() error {
		if !live.has(func(m map[string]string) bool { return m["talos-service"] != "" && m["test"] == "e2e" }) {
			return errors.New("nothing yet")
		}

		return nil
	})

	console := filepath.Join(h, ".talos", "clusters", "debug", "debug-controlplane-1.log")

	testenv.WaitFor(t, "apid's lines on the console", time.Minute, func() error {
		b, err := os.ReadFile(console)
		if err != nil {
			return err
		}

		if !strings.Contains(string(b), "debug: the services' logs go to the console too") || !strings.Contains(string(b), "\napid: ") {
			return os.ErrNotExist
		}

		return nil
	})

	// apid's own log has the same lines, without the prefix.
	if out := c.Must(t, "-n", "127.5.46.2", "logs", "apid"); strings.Contains(out, "apid: ") || out == "" {
		t.Errorf("apid's log: %q", out[:min(len(out), 300)])
	}
}

// jsonLogs is a TCP receiver of json_lines messages.
type jsonLogs struct {
	addr string
	mu   sync.Mutex
	msgs []map[string]string
}

func receiveJSONLogs(t *testing.T) *jsonLogs {
	t.Helper()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { l.Close() })

	r := &jsonLogs{addr: l.Addr().String()}

	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}

			go func() {
				defer conn.Close()

				for s := bufio.NewScanner(conn); s.Scan(); {
					var m map[string]string
					if json.Unmarshal(s.Bytes(), &m) == nil {
						r.mu.Lock()
						r.msgs = append(r.msgs, m)
						r.mu.Unlock()
					}
				}
			}()
		}
	}()

	return r
}

func (r *jsonLogs) has(match func(map[string]string) bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()

	return slices.ContainsFunc(r.msgs, match)
}
