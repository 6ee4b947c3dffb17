package faults

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talos-go/talos/internal/imager"
	"github.com/talos-go/talos/internal/testenv"
)

const vNext = "v9.9.1"

// upgradeImage signs an image of the node binary built to report vNext.
func upgradeImage(t *testing.T) string {
	t.Helper()

	key, err := imager.LoadPrivateKey(signingKey())
	if err != nil {
		t.Fatal(err)
	}

	path := filepath.Join(home, vNext+".img")
	if _, err = imager.BuildFile(path, imager.BuildOptions{Version: vNext, Key: key, Compress: true, Files: map[string]string{
		imager.MachinedName: testenv.MachinedVersion(t, vNext), imager.EtcdName: filepath.Join(binDir, "etcd"),
	}}); err != nil {
		t.Fatal(err)
	}

	return path
}

var serverTag = regexp.MustCompile(`(?s)Server:.*?Tag:\s+(\S+)`)

// nodeVersion is the version the node's machined reports.
func nodeVersion(t *testing.T, node string) string {
	t.Helper()

	var tag string

	testenv.WaitFor(t, "version of "+node, healthyBound, func() error {
		out, stderr, code := talosctl(t, "-n", node, "version")
		if m := serverTag.FindStringSubmatch(out); code == 0 && m != nil {
			tag = m[1]

			return nil
		}

		return fmt.Errorf("exit %d: %s%s", code, out, stderr)
	})

	return tag
}

// TestKillDuringUpgrade: a node is upgraded (into its other slot, with a reboot) while one of
// its services is killed at a random moment: before, during or after the image is written, or
// while the new slot boots. The node ends on the old version or the new one, healthy.
func TestKillDuringUpgrade(t *testing.T) {
	if err := clusterHealthy(t); err != nil {
		awaitHealthy(t, time.Now(), healthyBound)
	}

	image := upgradeImage(t)
	ec := etcdClient(t, cp1)

	for run := range runs {
		for _, svc := range services {
			t.Run(fmt.Sprintf("%s/%d", svc, run), func(t *testing.T) {
				node := victim(svc)
				if node == cp1 && svc != "etcd" && svc != "trustd" {
					node = w1 // the endpoint reboots too: keep it for the calls that watch
				}

				keys := putKeys(t, ec, fmt.Sprintf("upgrade-%s-%d", svc, run), 20)
				before := nodeVersion(t, node)
				cfgBefore := configAnnotation(t, node, "faults-gen")
				delay := time.Duration(rng.IntN(3000)) * time.Millisecond

				var (
					wg            sync.WaitGroup
					out, errOut   string
					code          int
					upgradeCalled = time.Now()
				)

				wg.Add(1)

				go func() {
					defer wg.Done()

					out, errOut, code = talosctl(t, "-n", node, "upgrade", "--image", image, "--preserve", "--wait", "--timeout", "2m")
				}()

				time.Sleep(delay)

				killed := time.Now()
				tryKill9(t, svc, node) // the node may be rebooting: then there is nothing to kill

				wg.Wait()
				t.Logf("upgrade of %s (%s killed %v after the call): exit %d in %v %s%s", node, svc, delay, code,
					time.Since(upgradeCalled).Round(100*time.Millisecond), out, strings.TrimSpace(errOut))

				recordRecovery("kill "+svc+" during upgrade", awaitHealthy(t, killed, healthyBound))

				after := nodeVersion(t, node)
				if after != before && after != vNext {
					t.Fatalf("node %s runs %q after the upgrade, neither the old %q nor the new %q", node, after, before, vNext)
				}

				if code == 0 && after != vNext {
					t.Fatalf("upgrade reported success but %s runs %q", node, after)
				}

				t.Logf("%s: %s -> %s", node, before, after)

				if got := configAnnotation(t, node, "faults-gen"); got != cfgBefore {
					t.Fatalf("machine config changed by an upgrade: faults-gen %q -> %q", cfgBefore, got)
				}

				checkKeys(t, ec, keys)
			})
		}
	}
}
