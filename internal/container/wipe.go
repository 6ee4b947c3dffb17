package container

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// wipeRequest is the file in META (the node's /system/meta, the launcher's DISK/META) by which a
// node asks its launcher to wipe partitions before its next start: the node cannot reach its
// EPHEMERAL folder, only the overlay /var made of it.
const wipeRequest = "wipe-request"

// wipeable are the partitions a reset may wipe.
var wipeable = []string{"STATE", "EPHEMERAL"}

// RequestWipe asks, from inside the node, for labels to be wiped when the node starts again.
func RequestWipe(labels []string) error {
	for _, l := range labels {
		if !slices.Contains(wipeable, l) {
			return fmt.Errorf("partition %q cannot be wiped: choose STATE and/or EPHEMERAL", l)
		}
	}

	return os.WriteFile(filepath.Join("/system", partitionDir("META"), wipeRequest), []byte(strings.Join(labels, "\n")+"\n"), 0o600)
}

// applyWipe wipes what the node asked for before it starts; after STATE is wiped the node has no
// config and must come back in maintenance mode, so the first-boot config is no longer given.
func applyWipe(spec *Spec) error {
	req := filepath.Join(spec.Disk, "META", wipeRequest)

	data, err := os.ReadFile(req)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}

	if err != nil {
		return err
	}

	labels := strings.Fields(string(data))
	for _, l := range labels {
		if !slices.Contains(wipeable, l) {
			return fmt.Errorf("%s: partition %q cannot be wiped (only STATE, EPHEMERAL): nothing was wiped", req, l)
		}
	}

	for _, l := range labels {
		dir := filepath.Join(spec.Disk, l)
		if err = os.RemoveAll(dir); err != nil {
			return fmt.Errorf("wiping %s: %w", l, err)
		}

		if err = os.MkdirAll(dir, 0o700); err != nil {
			return err
		}

		if l == "STATE" {
			spec.Config = ""
		}

		fmt.Fprintf(os.Stderr, "container: wiped %s\n", l)
	}

	return os.Remove(req)
}
