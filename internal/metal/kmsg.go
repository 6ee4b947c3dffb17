package metal

import (
	"bytes"
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

// KmsgPath is the kernel log's device.
const KmsgPath = "/dev/kmsg"

// Kmsg writes log lines to the kernel's log as upstream's machined does on metal: each line
// is one record at info level, prefixed [talos], which the console prints with the kernel's
// timestamp (printk.devkmsg=on, among the default kernel arguments, lifts the kernel's rate
// limit on them). A record longer than the kernel takes is cut. Records are written by a
// goroutine of their own: a slow console never holds up a caller, and when kmsgQueue records
// wait already, a new one is dropped and counted.
type Kmsg struct {
	f       *os.File
	records chan kmsgRecord
	dropped atomic.Int64
}

// kmsgRecord is a line to write, or (done set) a flush to answer.
type kmsgRecord struct {
	line []byte
	done chan struct{}
}

// kmsgMax is the longest record the kernel keeps whole (its LOG_LINE_MAX, less the prefix),
// and kmsgQueue how many records may wait.
const (
	kmsgMax   = 976
	kmsgQueue = 4096
)

// OpenKmsg opens the kernel log for writing.
func OpenKmsg() (*Kmsg, error) {
	f, err := os.OpenFile(KmsgPath, os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}

	k := &Kmsg{f: f, records: make(chan kmsgRecord, kmsgQueue)}

	go k.writeRecords()

	return k, nil
}

func (k *Kmsg) writeRecords() {
	for rec := range k.records {
		if rec.done != nil {
			close(rec.done)

			continue
		}

		if n := k.dropped.Swap(0); n > 0 {
			_, _ = fmt.Fprintf(k.f, "<4>[talos] %d log lines dropped: the console is slower than the log\n", n)
		}

		_, _ = k.f.Write(rec.line)
	}
}

// Flush waits, at most timeout, until the lines queued before it are written: the initramfs
// flushes before it execs machined, which would take queued lines with it.
func (k *Kmsg) Flush(timeout time.Duration) {
	done := make(chan struct{})

	select {
	case k.records <- kmsgRecord{done: done}:
	case <-time.After(timeout):
		return
	}

	select {
	case <-done:
	case <-time.After(timeout):
	}
}

// Write queues each line of p as one record. It reports p written even when a record is
// dropped: the log must not stop the node.
func (k *Kmsg) Write(p []byte) (int, error) {
	for line := range bytes.Lines(p) {
		line = bytes.TrimRight(line, "\n")
		if len(line) > kmsgMax {
			line = line[:kmsgMax]
		}

		// The newline ends the record: without it the kernel holds the record open for a
		// continuation, and the console prints it only when the next one comes.
		select {
		case k.records <- kmsgRecord{line: append(append([]byte("<6>[talos] "), line...), '\n')}:
		default:
			k.dropped.Add(1)
		}
	}

	return len(p), nil
}
