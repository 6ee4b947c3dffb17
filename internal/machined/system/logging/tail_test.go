package logging

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// lastLinesRef is the obvious tail on a whole log in memory, for comparison.
func lastLinesRef(data []byte, n int) []byte {
	switch {
	case n < 0:
		return data
	case n == 0:
		return nil
	}

	end := len(bytes.TrimSuffix(data, []byte("\n")))

	for i := end - 1; i >= 0; i-- {
		if data[i] == '\n' {
			if n--; n == 0 {
				return data[i+1:]
			}
		}
	}

	return data
}

// The chunked tail equals the whole-file one, with lines across chunk boundaries, with and
// without a final newline, for tails of every kind.
func TestSendTailMatchesWholeRead(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))

	for _, size := range []int{0, 1, 10, ChunkSize - 1, ChunkSize, ChunkSize + 1, 3*ChunkSize + 17} {
		data := make([]byte, size)
		for i := range data {
			data[i] = 'a'
			if r.IntN(200) == 0 {
				data[i] = '\n'
			}
		}

		if size > 0 && r.IntN(2) == 0 {
			data[size-1] = '\n'
		}

		for _, n := range []int{-1, 0, 1, 2, 7, 100, 1 << 20} {
			var got bytes.Buffer

			err := SendTail(bytes.NewReader(data), int64(size), n, func(b []byte) error {
				if len(b) > ChunkSize {
					t.Fatalf("a piece of %d bytes, over ChunkSize", len(b))
				}

				got.Write(b)

				return nil
			})
			if err != nil {
				t.Fatal(err)
			}

			if want := lastLinesRef(data, n); !bytes.Equal(got.Bytes(), want) {
				t.Errorf("size %d, tail %d: got %d bytes, want %d", size, n, got.Len(), len(want))
			}
		}
	}
}

// A 100 MiB log streams whole in ChunkSize pieces while the heap stays a few chunks big: it is
// never read into memory.
func TestReadHugeLogInChunks(t *testing.T) {
	dir := t.TempDir()

	m, err := NewManager(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	const size = 100 << 20

	line := append(bytes.Repeat([]byte("x"), 99), '\n')
	if err = os.WriteFile(filepath.Join(dir, "huge.log"), bytes.Repeat(line, size/len(line)), 0o600); err != nil {
		t.Fatal(err)
	}

	runtime.GC()

	var before, after runtime.MemStats

	runtime.ReadMemStats(&before)

	total, pieces := 0, 0

	err = m.Read(context.Background(), "huge", -1, false, func(b []byte) error {
		total += len(b)
		pieces++

		if len(b) > ChunkSize {
			t.Fatalf("a piece of %d bytes, over ChunkSize", len(b))
		}

		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	runtime.ReadMemStats(&after)

	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("read %d MiB in %d pieces, allocating %d KiB in all", total>>20, pieces, allocated>>10)

	if total != size/len(line)*len(line) {
		t.Fatalf("read %d bytes of %d", total, size/len(line)*len(line))
	}

	if allocated > 4<<20 {
		t.Fatalf("reading a 100 MiB log allocated %d MiB: it was read whole, not in chunks", allocated>>20)
	}
}
