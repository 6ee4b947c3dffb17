package partition

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const testDisk = 3 << 30

func writeDisk(t *testing.T) (string, []Placed) {
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

	parts, err := Plan(Layout, testDisk)
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
	path, parts := writeDisk(t)

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
		if got[i].Name != parts[i].Name || got[i].Type != parts[i].Type || got[i].GUID != parts[i].GUID || got[i].First != parts[i].First || got[i].Last != parts[i].Last {
			t.Errorf("partition %d: read %+v, wrote %+v", i+1, got[i], parts[i])
		}
	}

	// A corrupted entry is found out.
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}

	if _, err = w.WriteAt([]byte{'X'}, 2*SectorSize+56); err != nil {
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

	path, parts := writeDisk(t)

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
