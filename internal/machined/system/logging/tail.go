package logging

import (
	"errors"
	"io"
	"os"
)

// ChunkSize is the most one piece of a log read carries: a log of any size (a container's log
// can be gigabytes) streams in pieces of this through one buffer, never read whole into memory.
// A piece and its message's metadata fit in 32 KiB, the largest buffer grpc pools below 1 MiB:
// a 64 KiB piece took a 1 MiB buffer to encode, and every stream held one while it waited for
// its reader (72 streams of a stalled reader: 72 MiB).
const ChunkSize = 31 << 10

// TailStart is where the last n lines of r's first size bytes begin: 0 when there are fewer
// lines or n < 0 (the whole log), size when n == 0. A final newline ends the last line; it
// does not begin another. It reads backwards from the end, a chunk at a time.
func TailStart(r io.ReaderAt, size int64, n int) (int64, error) {
	switch {
	case n < 0:
		return 0, nil
	case n == 0:
		return size, nil
	}

	buf := make([]byte, min(size, ChunkSize))
	end := size

	for first := true; end > 0; first = false {
		start := max(0, end-ChunkSize)
		b := buf[:end-start]

		if _, err := r.ReadAt(b, start); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}

		if first && b[len(b)-1] == '\n' {
			b = b[:len(b)-1]
		}

		for i := len(b) - 1; i >= 0; i-- {
			if b[i] == '\n' {
				if n--; n == 0 {
					return start + int64(i) + 1, nil
				}
			}
		}

		end = start
	}

	return 0, nil
}

// SendRange sends r's bytes from from to to, in pieces of at most ChunkSize that fn must not
// keep after it returns (one buffer is reused).
func SendRange(r io.ReaderAt, from, to int64, fn func([]byte) error) error {
	if to <= from {
		return nil
	}

	buf := make([]byte, min(to-from, ChunkSize))

	for from < to {
		b := buf[:min(to-from, int64(len(buf)))]

		n, err := r.ReadAt(b, from)
		if n > 0 {
			if err := fn(b[:n]); err != nil {
				return err
			}

			from += int64(n)
		}

		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil // the file is shorter than it was: what there was is sent
			}

			return err
		}
	}

	return nil
}

// SendTail sends the last n lines (all when n < 0) of the first size bytes of f in chunks, as
// TailStart and SendRange.
func SendTail(f io.ReaderAt, size int64, n int, fn func([]byte) error) error {
	start, err := TailStart(f, size, n)
	if err != nil {
		return err
	}

	return SendRange(f, start, size, fn)
}

// openSized opens a log file and reads its size now; later writes are not part of what the
// caller sends this time.
func openSized(path string) (*os.File, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}

	st, err := f.Stat()
	if err != nil {
		f.Close()

		return nil, 0, err
	}

	return f, st.Size(), nil
}
