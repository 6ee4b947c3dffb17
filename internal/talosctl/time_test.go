package talosctl

import (
	"encoding/binary"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"

	"github.com/talos-go/talos/internal/testenv"
)

// ntpServer answers NTP client requests on loopback with its clock shifted by offset, so a
// test can tell its answer from the local clock.
func ntpServer(t *testing.T, offset time.Duration) string {
	t.Helper()

	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { conn.Close() })

	go func() {
		buf := make([]byte, 48)

		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}

			if n < 48 {
				continue
			}

			now := ntpStamp(time.Now().Add(offset))
			reply := make([]byte, 48)
			reply[0] = 0<<6 | 4<<3 | 4 // no leap warning, version 4, mode server
			reply[1] = 1               // stratum 1
			reply[2] = buf[2]          // poll
			reply[3] = 0xec            // precision
			copy(reply[12:16], "LOCL") // reference id
			binary.BigEndian.PutUint64(reply[16:], now)
			copy(reply[24:32], buf[40:48]) // origin: the client's transmit time
			binary.BigEndian.PutUint64(reply[32:], now)
			binary.BigEndian.PutUint64(reply[40:], now)

			_, _ = conn.WriteTo(reply, from)
		}
	}()

	return conn.LocalAddr().String()
}

// ntpStamp is t as an NTP timestamp: seconds since 1900 and a 32-bit fraction.
func ntpStamp(t time.Time) uint64 {
	const era = 2208988800 // seconds from 1900 to 1970

	secs := uint64(t.Unix() + era)
	frac := uint64(t.Nanosecond()) << 32 / 1e9

	return secs<<32 | frac
}

func withTimeServer(t *testing.T, cfg []byte, server string) []byte {
	t.Helper()

	patch, err := configpatcher.LoadPatch([]byte("machine:\n  time:\n    servers: [\"" + server + "\"]\n"))
	if err != nil {
		t.Fatal(err)
	}

	out, err := configpatcher.Apply(configpatcher.WithBytes(cfg), []configpatcher.Patch{patch})
	if err != nil {
		t.Fatal(err)
	}

	p, err := out.Config()
	if err != nil {
		t.Fatal(err)
	}

	b, err := p.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		t.Fatal(err)
	}

	if _, err = configloader.NewFromBytes(b); err != nil {
		t.Fatal(err)
	}

	return b
}

// TestIntegrationTimeAndWipe: `time` shows the node's clock beside the NTP server's, which the
// node itself queried (its configured server, or --check's); `wipe disk` names the node and the
// method it lacks.
func TestIntegrationTimeAndWipe(t *testing.T) {
	isolate(t)

	configured := ntpServer(t, time.Hour)
	checked := ntpServer(t, -time.Hour)

	addr := "127.5.23.1"
	n := testenv.StartNode(t, addr, withTimeServer(t, testenv.Config(t, machine.TypeControlPlane, addr), configured))
	sock := []string{"--machined-socket", n.Socket()}

	for _, c := range []struct {
		args   []string
		server string
		offset time.Duration
	}{
		{[]string{"time"}, configured, time.Hour},
		{[]string{"time", "--check", checked}, checked, -time.Hour},
	} {
		out, _ := runUntil(t, ok, append(c.args, sock...)...)
		mustContain(t, out, "NODE", "NTP-SERVER", "NODE-TIME", "NTP-SERVER-TIME", c.server)

		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 {
			t.Fatalf("%v: want a header and one node, got:\n%s", c.args, out)
		}

		cols := strings.Fields(lines[1])

		local, err := time.Parse(time.RFC3339Nano, cols[2])
		if err != nil {
			t.Fatal(err)
		}

		remote, err := time.Parse(time.RFC3339Nano, cols[3])
		if err != nil {
			t.Fatal(err)
		}

		if d := remote.Sub(local) - c.offset; d.Abs() > 10*time.Second {
			t.Errorf("%v: server time %s is not node time %s shifted by %s", c.args, remote, local, c.offset)
		}
	}

	// A server that does not answer fails the call with the server's name.
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	defer silent.Close()

	code, _, stderr := run(t, append([]string{"time", "-c", silent.LocalAddr().String()}, sock...)...)
	if code == 0 || !strings.Contains(stderr, silent.LocalAddr().String()) {
		t.Errorf("time against a silent server: code %d, stderr %q", code, stderr)
	}

	code, _, stderr = run(t, append([]string{"wipe", "disk", "vda"}, sock...)...)
	if code == 0 {
		t.Fatal("wipe disk succeeded on a node without block devices")
	}

	mustContain(t, stderr, "local", "wipe disk (StorageService.BlockDeviceWipe)", "does not implement")

	code, _, stderr = run(t, append([]string{"wipe", "disk", "vda", "--method", "SLOW"}, sock...)...)
	if code == 0 || !strings.Contains(stderr, "--method") {
		t.Errorf("bad --method: code %d, stderr %q", code, stderr)
	}
}
