package metal

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/testenv"
)

// bootPhases are the console lines that end each phase of a boot, as the kernel's timestamps
// (seconds since the kernel started) show them: the kernel runs the initramfs's /init, the
// init switches to the node image, machined has its config, and apid serves (its health check,
// a TLS handshake on port 50000, passes).
var bootPhases = []struct{ name, line string }{
	{"init", `Run /init as init process`},
	{"image", `\[talos\] switched to the node image`},
	{"config", `\[talos\] .*"task": "loadConfig"`},
	{"apid", `\[talos\] .*"service": "apid", "state": "Running", "message": "Health check successful"`},
}

// BenchmarkBootToAPI boots a control plane under QEMU (TCG here: no KVM) with its config from
// talos.config= and its time from a local NTP server, until apid answers talosctl with mTLS.
// It reports when each phase ended, from the kernel's timestamps on the console (s-to-init,
// s-to-image, s-to-config, s-to-apid; goal: s-to-apid under 8), the wall time from QEMU's start
// to talosctl's answer, and the sizes of the boot assets.
//
//	nsrun go test -run '^$' -bench BootToAPI -benchtime 3x ./internal/e2e/metal/
func BenchmarkBootToAPI(b *testing.B) {
	cli := testenv.CLI{Binary: filepath.Join(binDir, "talosctl"), Home: b.TempDir(), Timeout: 30 * time.Second}
	src := serveConfig(b, cli)
	cli.TalosConfig = src.talosconfig

	sums := map[string]float64{}

	for range b.N {
		start := time.Now()
		m := bootWith(b, qemuOptions{open: true}, "ip=10.0.2.15::10.0.2.2:255.255.255.0:metal-1:eth0:off", "talos.config="+src.arg)
		ep := fmt.Sprintf("127.0.0.1:%d", m.port)

		testenv.WaitFor(b, "apid", 4*time.Minute, func() error {
			select {
			case <-m.exited:
				return fmt.Errorf("QEMU exited: %s", m.stderr.String())
			default:
			}

			if _, errOut, code := cli.Run(b, "-e", ep, "-n", "10.0.2.15", "version", "--short"); code != 0 {
				return fmt.Errorf("%s", errOut)
			}

			// talosctl may be answered before the health check that logs apid serving.
			_, err := kernelTime(m.consoleText(), bootPhases[len(bootPhases)-1].line)

			return err
		})

		sums["s-wall-to-apid"] += time.Since(start).Seconds()

		console := m.consoleText()
		for _, p := range bootPhases {
			at, err := kernelTime(console, p.line)
			if err != nil {
				b.Fatal(err)
			}

			sums["s-to-"+p.name] += at
		}

		_ = m.cmd.Process.Kill()
		<-m.exited
	}

	for name, sum := range sums {
		b.ReportMetric(sum/float64(b.N), name)
	}

	for name, file := range map[string]string{"MB-kernel": kernel, "MB-initramfs": initramfs} {
		if st, err := os.Stat(file); err == nil {
			b.ReportMetric(float64(st.Size())/1e6, name)
		}
	}

	b.ReportMetric(0, "ns/op") // the phases are the measure, not the loop's time
}

// kernelTime is the kernel's timestamp of the first console line matching line.
func kernelTime(console, line string) (float64, error) {
	m := regexp.MustCompile(`(?m)^\[\s*(\d+\.\d+)\] ` + line).FindStringSubmatch(console)
	if m == nil {
		return 0, fmt.Errorf("the console has no line %q", line)
	}

	return strconv.ParseFloat(m[1], 64)
}
