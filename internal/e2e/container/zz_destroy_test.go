package container

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	ctr "github.com/talos-go/talos/internal/container"
	"github.com/talos-go/talos/internal/testenv"
)

// Runs last: destroy removes everything the create made. It is alone in the file that sorts
// last, since the suite runs its tests in source order (testenv.KeepOrder) and a test added in
// a later file would otherwise find the cluster gone.
func TestZDestroyLeavesNothing(t *testing.T) {
	// A --provisioner that is not the cluster's is refused before anything is done.
	if _, errOut, code := talosctl(t, "cluster", "destroy", "--name", clusterName, "--provisioner", "process"); code == 0 || !strings.Contains(errOut, "created by --provisioner container") {
		t.Fatalf("destroy with the wrong provisioner: exit %d\n%s", code, errOut)
	}

	// The logs and a support archive are saved first, as upstream's flags ask.
	dir := t.TempDir()
	logs, support := filepath.Join(dir, "logs.tar.gz"), filepath.Join(dir, "support.zip")
	must(t, "cluster", "destroy", "--name", clusterName, "--provisioner", "container",
		"--save-cluster-logs-archive-path", logs, "--save-support-archive-path", support)
	destroyed = true

	if names := tarNames(t, logs); !slices.Contains(names, clusterName+"-controlplane-1.log") {
		t.Errorf("the logs archive holds %v, no control plane log", names)
	}

	if fi, err := os.Stat(support); err != nil || fi.Size() == 0 {
		t.Errorf("no support archive: %v", err)
	}

	testenv.WaitFor(t, "nothing left after destroy", 30*time.Second, func() error {
		after, err := snapshot()
		if err != nil {
			return err
		}

		return before.diff(after)
	})

	if _, err := os.Stat(filepath.Join(stateRoot, clusterName)); !os.IsNotExist(err) {
		t.Fatalf("cluster folder left behind: %v", err)
	}

	for _, d := range ctr.CgroupDirs(clusterName) {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Fatalf("cgroup %s left behind", d)
		}
	}
}
