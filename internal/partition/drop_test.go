package partition

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Dropping partition 5 (STATE) of upstream's layout leaves the others with their numbers, the
// disk's GUID and a table sfdisk verifies, in both copies; a partition that is not there, or a
// damaged backup table, changes nothing.
func TestDrop(t *testing.T) {
	for _, ss := range []int64{SectorSize, SectorSize4K} {
		path, parts := writeDisk(t, ss)

		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}

		guid := func() []byte {
			h, err := readTable(f, 1, ss)
			if err != nil {
				t.Fatal(err)
			}

			return h.header[56:72]
		}
		before := guid()

		if err = Drop(f, 5); err != nil {
			t.Fatal(err)
		}

		got, err := Read(f)
		if err != nil {
			t.Fatal(err)
		}

		if len(got) != len(parts)-1 || got[3].Number != 4 || got[4].Number != 6 || got[4].Name != Ephemeral || got[4].GUID != parts[5].GUID {
			t.Fatalf("after dropping 5 (%d-byte sectors): %+v", ss, got)
		}

		if !bytes.Equal(guid(), before) {
			t.Fatal("the disk GUID changed")
		}

		primary, _ := readTable(f, 1, ss)

		backup, err := readTable(f, testDisk/ss-1, ss)
		if err != nil || !bytes.Equal(backup.entries, primary.entries) {
			t.Fatalf("the backup table does not match the primary: %v", err)
		}

		if ss == SectorSize {
			if _, err := exec.LookPath("sfdisk"); err == nil {
				if out, err := exec.Command("sfdisk", "--verify", path).CombinedOutput(); err != nil {
					t.Errorf("sfdisk --verify: %v: %s", err, out)
				}
			}
		}

		unchanged := func(what string, drop func() error) {
			t.Helper()

			was := tables(t, f, ss)
			if err := drop(); err == nil {
				t.Fatalf("%s: no error", what)
			}

			if !bytes.Equal(tables(t, f, ss), was) {
				t.Fatalf("%s changed the disk", what)
			}
		}

		unchanged("dropping 5 again", func() error { return Drop(f, 5) })
		unchanged("dropping 200", func() error { return Drop(f, 200) })

		// A damaged backup: the primary is not written either.
		if _, err = f.WriteAt([]byte("X"), (testDisk/ss-1)*ss+60); err != nil {
			t.Fatal(err)
		}

		unchanged("dropping with a damaged backup", func() error {
			err := Drop(f, 1)
			if err != nil && !strings.Contains(err.Error(), "backup") {
				t.Errorf("the error does not name the backup table: %v", err)
			}

			return err
		})

		f.Close()
	}
}

// tables are the sectors of both GPT copies.
func tables(t *testing.T, f *os.File, ss int64) []byte {
	t.Helper()

	n := (1 + entrySectors(ss)) * ss
	b := make([]byte, 2*n)

	if _, err := f.ReadAt(b[:n], ss); err != nil {
		t.Fatal(err)
	}

	if _, err := f.ReadAt(b[n:], testDisk-n); err != nil {
		t.Fatal(err)
	}

	return b
}
