package server

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/talos-go/talos/internal/machined/system/logging"
)

// criLogs streams a CRI container's log from kubelet's folder, as upstream:
// /var/log/pods/NAMESPACE_POD_UID/CONTAINER/RESTART.log, the latest restart's.
func (s *Machine) criLogs(req *machine.LogsRequest, srv grpc.ServerStreamingServer[common.Data]) error {
	ctx := srv.Context()

	client, err := s.containerdClient(criNamespace)
	if err != nil {
		return err
	}
	defer client.Close()

	c, err := s.findContainer(ctx, client, req.Id)
	if err != nil {
		return err
	}

	labels, err := c.Labels(ctx)
	if err != nil {
		return status.Errorf(codes.Internal, "container %s: %v", req.Id, err)
	}

	dir := filepath.Join(s.R.Paths.Logs(), "pods", labels[labelPodNamespace]+"_"+labels[labelPodName]+"_"+labels[labelPodUID], labels[labelContainer])

	path, err := latestRestartLog(dir)
	if err != nil {
		return status.Errorf(codes.NotFound, "no log for container %s in %s: %v", req.Id, dir, err)
	}

	f, err := os.Open(path)
	if err != nil {
		return status.Errorf(codes.Internal, "container log: %v", err)
	}
	defer f.Close()

	md := s.metadata(ctx)
	send := func(b []byte) error { return srv.Send(&common.Data{Metadata: md, Bytes: b}) }

	st, err := f.Stat()
	if err != nil {
		return status.Errorf(codes.Internal, "container log: %v", err)
	}

	// The tail streams in chunks: a container's log may be gigabytes, never read whole.
	tail := int(req.TailLines)
	if tail <= 0 {
		tail = -1 // all
	}

	if err = logging.SendTail(f, st.Size(), tail, func(b []byte) error {
		if err := send(b); err != nil {
			return errSend{err}
		}

		return nil
	}); err != nil {
		var se errSend
		if errors.As(err, &se) {
			return se.error
		}

		return status.Errorf(codes.Internal, "reading %s: %v", path, err)
	}

	if !req.Follow {
		return nil
	}

	// Follow: what kubelet's runtime appends, until the client goes.
	if _, err = f.Seek(st.Size(), io.SeekStart); err != nil {
		return status.Errorf(codes.Internal, "reading %s: %v", path, err)
	}

	buf := make([]byte, logging.ChunkSize)

	for {
		n, err := f.Read(buf)
		if n > 0 {
			if err = send(buf[:n]); err != nil {
				return err
			}

			continue
		}

		if err != nil && !errors.Is(err, io.EOF) {
			return status.Errorf(codes.Internal, "reading %s: %v", path, err)
		}

		select {
		case <-ctx.Done():
			return nil
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// latestRestartLog is the log of the container's highest restart count in dir.
func latestRestartLog(dir string) (string, error) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(logs) == 0 {
		return "", fmt.Errorf("no *.log files")
	}

	restart := func(p string) int {
		n, _ := strconv.Atoi(strings.TrimSuffix(filepath.Base(p), ".log"))

		return n
	}

	sort.Slice(logs, func(i, j int) bool { return restart(logs[i]) < restart(logs[j]) })

	return logs[len(logs)-1], nil
}

// errSend is a failed send, told apart from a failed read.
type errSend struct{ error }
