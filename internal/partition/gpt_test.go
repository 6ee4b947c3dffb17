package partition

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const testDisk = 3 << 30

func writeDisk(t *testing.T, ss int64) (string, []Placed) {
	t.Helper()

	path := filepath.Join(t.TempDir(), "disk.raw")

	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	if err = f.Truncate(testDisk); err != nil {
		t.Fatal(err)
	}

	parts, err := PlanSectors(Layout, testDisk, ss)
	if err != nil {
		t.Fatal(err)
	}

	if err = Write(f, testDisk, parts); err != nil {
		t.Fatal(err)
	}

	return path, parts
}

func TestPlanIsUpstreamLayout(t *testing.T) {
	parts, err := Plan(Layout, testDisk)
	if err != nil {
		t.Fatal(err)
	}

	want := []struct {
		name        string
		first, last int64
	}{
		{EFI, 2048, 206847},
		{BIOS, 206848, 208895},
		{Boot, 208896, 2256895},
		{Meta, 2256896, 2258943},
		{State, 2258944, 2463743},
		{Ephemeral, 2463744, testDisk/SectorSize/2048*2048 - 2048 - 1},
	}

	for i, w := range want {
		p := parts[i]
		if p.Name != w.name || p.First != w.first || p.Last != w.last || p.Number != i+1 {
			t.Errorf("partition %d: %s %d-%d, want %s %d-%d", i+1, p.Name, p.First, p.Last, w.name, w.first, w.last)
		}
	}

	if _, err = Plan(Layout, 2<<30); err == nil || !strings.Contains(err.Error(), "at least 2228 MiB") {
		t.Errorf("a 2 GiB disk: %v, want a refusal naming the size needed", err)
	}
}

func TestWriteReadBack(t *testing.T) {
	for _, ss := range []int64{SectorSize, SectorSize4K} {
		t.Run(strconv.FormatInt(ss, 10), func(t *testing.T) { writeReadBack(t, ss) })
	}
}

func writeReadBack(t *testing.T, ss int64) {
	path, parts := writeDisk(t, ss)

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	got, err := Read(f)
	if err != nil {
		t.Fatal(err)
	}

	if len(got) != len(parts) {
		t.Fatalf("read %d partitions, wrote %d", len(got), len(parts))
	}

	for i := range got {
		if got[i].Name != parts[i].Name || got[i].Type != parts[i].Type || got[i].GUID != parts[i].GUID || got[i].First != parts[i].First || got[i].Last != parts[i].Last ||
			got[i].SectorSize != ss || got[i].Offset() != parts[i].Offset() || got[i].Offset()%MiB != 0 {
			t.Errorf("partition %d: read %+v, wrote %+v", i+1, got[i], parts[i])
		}
	}

	// A corrupted entry is found out.
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}

	if _, err = w.WriteAt([]byte{'X'}, 2*ss+56); err != nil {
		t.Fatal(err)
	}

	w.Close()

	if _, err = Read(f); err == nil {
		t.Error("a changed partition name was not noticed")
	}
}

// util-linux's sfdisk reads the table as written: an independent reader of GPT (the host's kernel
// here has no GPT support to read it through a loop device; the metal suite's guests do).
func TestSfdiskReadsTable(t *testing.T) {
	if _, err := exec.LookPath("sfdisk"); err != nil {
		t.Skip("no sfdisk (Debian's fdisk package)")
	}

	path, parts := writeDisk(t, SectorSize)

	out, err := exec.Command("sfdisk", "--json", path).Output()
	if err != nil {
		t.Fatalf("sfdisk: %v", err)
	}

	var dump struct {
		PartitionTable struct {
			Label      string `json:"label"`
			Partitions []struct {
				Start, Size int64
				Type, UUID  string
				Name        string
			} `json:"partitions"`
		} `json:"partitiontable"`
	}

	if err = json.Unmarshal(out, &dump); err != nil {
		t.Fatal(err)
	}

	got := dump.PartitionTable.Partitions
	if dump.PartitionTable.Label != "gpt" || len(got) != len(parts) {
		t.Fatalf("sfdisk reads %s with %d partitions, want gpt with %d", dump.PartitionTable.Label, len(got), len(parts))
	}

	for i, p := range parts {
		g := got[i]
		if g.Name != p.Name || g.Start != p.First || g.Size != p.Last-p.First+1 || !strings.EqualFold(g.Type, p.Type.String()) || !strings.EqualFold(g.UUID, p.GUID.String()) {
			t.Errorf("partition %d: sfdisk reads %+v, wrote %+v", i+1, g, p)
		}
	}

	if out, err = exec.Command("sfdisk", "--verify", path).CombinedOutput(); err != nil {
		t.Errorf("sfdisk --verify: %v: %s", err, out)
	}
}

// util-linux's fdisk, told the disk has 4096-byte sectors, reads the table written for them:
// each partition where it was placed, by name.
func TestFdiskReads4KTable(t *testing.T) {
	if _, err := exec.LookPath("fdisk"); err != nil {
		t.Skip("no fdisk (Debian's fdisk package)")
	}

	path, parts := writeDisk(t, SectorSize4K)

	out, err := exec.Command("fdisk", "-b", "4096", "-l", "-o", "Start,End,Name", path).CombinedOutput()
	if err != nil {
		t.Fatalf("fdisk: %v: %s", err, out)
	}

	for _, p := range parts {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^\s*%d\s+%d\s+%s\s*$`, p.First, p.Last, p.Name)).MatchString(string(out)) {
			t.Errorf("fdisk does not read %s at %d-%d:\n%s", p.Name, p.First, p.Last, out)
		}
	}

	if !strings.Contains(string(out), "Sector size (logical/physical): 4096 bytes") || strings.Contains(string(out), "corrupt") {
		t.Errorf("fdisk:\n%s", out)
	}
}
