package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// A run that was killed left a node running from its binary folder: the next run kills it and
// removes the folder; a live process's folder stays.
func TestSweepKillsWhatAGoneRunLeft(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}

	dir := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d", binDirPrefix, gone.Process.Pid))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}

	b, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}

	if err = os.WriteFile(filepath.Join(dir, "machined"), b, 0o700); err != nil {
		t.Fatal(err)
	}

	orphan := exec.Command(filepath.Join(dir, "machined"), "600")
	if err = orphan.Start(); err != nil {
		t.Fatal(err)
	}

	exited := make(chan error, 1)
	go func() { exited <- orphan.Wait() }()

	t.Cleanup(func() { orphan.Process.Kill() })

	removeStaleBinDirs()

	select {
	case err := <-exited:
		if err == nil || err.Error() != "signal: killed" {
			t.Errorf("the left node ended with %v, want killed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the node left by a gone run still runs")
	}

	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the gone run's folder is still there: %v", err)
	}
}
