package metal

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Flush returns once the lines queued before it are written: the initramfs flushes before it
// execs machined, which would otherwise take the last lines with it.
func TestKmsgFlush(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "kmsg"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	k := &Kmsg{f: f, records: make(chan kmsgRecord, kmsgQueue)}
	go k.writeRecords()

	for range 100 {
		k.Write([]byte("a line\n"))
	}

	k.Write([]byte("switched to the node image\n"))
	k.Flush(10 * time.Second)

	b, err := os.ReadFile(f.Name())
	if err != nil || len(b) == 0 || string(b[len(b)-len("<6>[talos] switched to the node image\n"):]) != "<6>[talos] switched to the node image\n" {
		t.Fatalf("after Flush the log ends %q (%v)", b[max(0, len(b)-60):], err)
	}
}
