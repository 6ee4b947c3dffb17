package udev

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The rules this udevd does not run are refused with the key, never half applied.
func TestParseRulesRefusesWhatItDoesNotRun(t *testing.T) {
	for rule, want := range map[string]string{
		`KERNEL=="vdb", RUN+="/bin/true"`:                     "RUN+= is not supported",
		`KERNEL=="vdb", MODE="0666"`:                          "MODE= is not supported",
		`ATTRS{serial}=="x", SYMLINK+="data"`:                 "matching on ATTRS is not supported",
		`KERNEL=="vdb"`:                                       "no assignment",
		`KERNEL=="vdb", SYMLINK+="disk/by-id/data"`:           "SYMLINK under disk/",
		`KERNEL=="vdb", SYMLINK+="data-%n"`:                   `substitution at "%n"`,
		`KERNEL=="vdb", SYMLINK+="data`:                       "not closed",
		`KERNEL=="vdb", ATTR{../../x}="1"`:                    "a path under its sysfs folder",
		`KERNEL=="vdb" SYMLINK+="a", ENV{X}=="1", GOTO="end"`: "GOTO= is not supported",
	} {
		if _, err := ParseRules([]string{"# a comment\n" + rule}); err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "[0]: ") {
			t.Errorf("%s: got %v, want an error of rule [0] with %q", rule, err, want)
		}
	}

	rules, err := ParseRules([]string{"KERNEL==\"vd*\", \\\n  SUBSYSTEM==\"block\", SYMLINK+=\"a-%k b\"\n\n# c\nACTION!=\"remove\", ENV{X}=\"1\""})
	if err != nil || len(rules) != 2 || len(rules[0].Match) != 2 || len(rules[1].Set) != 1 {
		t.Fatalf("parsed %+v, %v", rules, err)
	}
}

// Rules run on a device as udevd runs them: in order, every match key must hold (globs, |
// alternatives, !=), ENV{}= is seen by the later rules, ATTR{}= writes the device's sysfs file.
func TestRulesApply(t *testing.T) {
	sys := t.TempDir()
	dev := filepath.Join(sys, "devices", "pci0000:00", "virtio2", "block", "vdb")

	if err := os.MkdirAll(filepath.Join(dev, "queue"), 0o755); err != nil {
		t.Fatal(err)
	}

	for name, content := range map[string]string{
		"uevent": "MAJOR=254\nMINOR=16\nDEVNAME=vdb\nDEVTYPE=disk\n", "serial": "data-1\n", "queue/read_ahead_kb": "128\n",
	} {
		if err := os.WriteFile(filepath.Join(dev, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	if err := os.MkdirAll(filepath.Join(sys, "class", "block"), 0o755); err != nil {
		t.Fatal(err)
	}

	if err := os.Symlink(filepath.Join(sys, "class", "block"), filepath.Join(dev, "subsystem")); err != nil {
		t.Fatal(err)
	}

	if err := os.Symlink(dev, filepath.Join(sys, "class", "block", "vdb")); err != nil {
		t.Fatal(err)
	}

	rules, err := ParseRules([]string{
		`SUBSYSTEM=="block", KERNEL=="vda|vdb", ATTR{serial}=="data-*", ENV{ROLE}="data"`,
		`ENV{ROLE}=="data", SYMLINK+="data-%k", ATTR{queue/read_ahead_kb}="4096"`,
		`KERNEL=="vdb", DEVTYPE!="disk", SYMLINK+="partition"`,
		`ACTION=="change", SYMLINK+="changed"`,
		`SUBSYSTEM=="net", SYMLINK+="net"`,
	})
	if err != nil {
		t.Fatal(err)
	}

	devices := AllDevices(sys)
	if !slices.Equal(devices, []string{dev}) {
		t.Fatalf("devices %v, want [%s]", devices, dev)
	}

	res := rules.Apply(ReadDevice(devices[0], "add"))
	if !slices.Equal(res.Links, []string{"data-vdb"}) || res.Attrs["queue/read_ahead_kb"] != "4096" || len(res.Errors) != 0 {
		t.Errorf("add: %+v, want the link data-vdb and read_ahead_kb 4096", res)
	}

	if b, _ := os.ReadFile(filepath.Join(dev, "queue", "read_ahead_kb")); string(b) != "4096" {
		t.Errorf("read_ahead_kb is %q, want 4096", b)
	}

	if res = rules.Apply(ReadDevice(dev, "change")); !slices.Equal(res.Links, []string{"data-vdb", "changed"}) {
		t.Errorf("change: links %v, want data-vdb and changed", res.Links)
	}

	// A write the kernel refuses is the rule's error, not a crash.
	bad, _ := ParseRules([]string{`KERNEL=="vdb", ATTR{nope/x}="1"`})
	if res = bad.Apply(ReadDevice(dev, "add")); len(res.Errors) != 1 {
		t.Errorf("a write to a missing attribute: %+v, want one error", res)
	}
}
