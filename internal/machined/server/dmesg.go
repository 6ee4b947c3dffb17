package server

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/siderolabs/go-kmsg"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Dmesg streams the kernel log from /dev/kmsg: what is there (Tail: nothing of it), then,
// with Follow, new messages until the caller goes. Lines read as upstream's. The kernel log
// is the kernel's, not the node's: a container-mode node sees its host's, as upstream's
// docker nodes do.
func (s *Machine) Dmesg(req *machine.DmesgRequest, srv grpc.ServerStreamingServer[common.Data]) error {
	var opts []kmsg.Option

	if req.GetFollow() {
		opts = append(opts, kmsg.Follow())
	}

	if req.GetTail() {
		opts = append(opts, kmsg.FromTail())
	}

	reader, err := kmsg.NewReader(opts...)
	if err != nil {
		return kmsgError(err)
	}

	// Headers now: a follower knows its place in the log is taken (after the tail, with Tail).
	if err = srv.SendHeader(nil); err != nil {
		reader.Close()

		return err
	}

	ctx := srv.Context()
	packets := reader.Scan(ctx)

	defer func() {
		reader.Close()

		for range packets { //nolint:revive // the scanner ends once it sees the close
		}
	}()

	for {
		select {
		case <-ctx.Done():
			return nil
		case p, ok := <-packets:
			if !ok {
				return nil
			}

			data := &common.Data{}

			if p.Err != nil {
				data.Metadata = &common.Metadata{Error: p.Err.Error()}
			} else {
				m := p.Message
				data.Bytes = fmt.Appendf(nil, "%s: %7s: [%s]: %s", m.Facility, m.Priority, m.Timestamp.Format(time.RFC3339Nano), m.Message)
			}

			if err = srv.Send(data); err != nil {
				return err
			}
		}
	}
}

// kmsgError says why the kernel log cannot be read. An unprivileged process-mode node hits
// the kernel's own rule: with kernel.dmesg_restrict=1 only CAP_SYSLOG may read it.
func kmsgError(err error) error {
	switch {
	case errors.Is(err, os.ErrPermission):
		return status.Errorf(codes.FailedPrecondition,
			"reading the kernel log: %v: the kernel allows it only to processes with CAP_SYSLOG while kernel.dmesg_restrict is 1, and this node runs as uid %d without it", err, os.Getuid())
	case errors.Is(err, os.ErrNotExist):
		return status.Errorf(codes.FailedPrecondition, "reading the kernel log: %v: this node has no /dev/kmsg", err)
	default:
		return status.Errorf(codes.Internal, "reading the kernel log: %v", err)
	}
}
