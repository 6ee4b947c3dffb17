package server

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// List walks a folder of the node.
func (s *Machine) List(req *machine.ListRequest, srv grpc.ServerStreamingServer[machine.FileInfo]) error {
	root := req.Root
	if root == "" {
		root = "/"
	}

	hostRoot, err := s.hostPath(root)
	if err != nil {
		return err
	}

	hostRoot = walkRoot(hostRoot)

	maxDepth := 1
	if req.Recurse {
		maxDepth = int(req.RecursionDepth)
		if maxDepth <= 0 {
			maxDepth = -1
		}
	}

	md := s.metadata(srv.Context())

	return filepath.WalkDir(hostRoot, func(path string, d fs.DirEntry, walkErr error) error {
		rel, _ := filepath.Rel(hostRoot, path)
		depth := 0

		if rel != "." {
			depth = strings.Count(rel, string(filepath.Separator)) + 1
		}

		info := &machine.FileInfo{Metadata: md, Name: filepath.Join(root, rel), RelativeName: rel}

		if walkErr != nil {
			info.Error = walkErr.Error()
		} else if fi, err := d.Info(); err != nil {
			info.Error = err.Error()
		} else {
			info.Size, info.Mode, info.Modified, info.IsDir = fi.Size(), uint32(fi.Mode()), fi.ModTime().Unix(), fi.IsDir()

			if fi.Mode()&os.ModeSymlink != 0 {
				info.Link, _ = os.Readlink(path)
			}
		}

		if !typeMatches(req.Types, d) {
			if d != nil && d.IsDir() && maxDepth >= 0 && depth >= maxDepth {
				return filepath.SkipDir
			}

			return nil
		}

		if err := srv.Send(info); err != nil {
			return err
		}

		if d != nil && d.IsDir() && maxDepth >= 0 && depth >= maxDepth {
			return filepath.SkipDir
		}

		return nil
	})
}

func typeMatches(types []machine.ListRequest_Type, d fs.DirEntry) bool {
	if len(types) == 0 || d == nil {
		return true
	}

	for _, t := range types {
		switch {
		case t == machine.ListRequest_REGULAR && d.Type().IsRegular(),
			t == machine.ListRequest_DIRECTORY && d.IsDir(),
			t == machine.ListRequest_SYMLINK && d.Type()&fs.ModeSymlink != 0:
			return true
		}
	}

	return false
}

// Read streams a file of the node.
func (s *Machine) Read(req *machine.ReadRequest, srv grpc.ServerStreamingServer[common.Data]) error {
	path, err := s.hostPath(req.Path)
	if err != nil {
		return err
	}

	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return status.Errorf(codes.NotFound, "%s: no such file", req.Path)
	}

	if err != nil {
		return status.Errorf(codes.Internal, "opening %s: %v", req.Path, err)
	}
	defer f.Close()

	if st, err := f.Stat(); err == nil && st.IsDir() {
		return status.Errorf(codes.InvalidArgument, "%s is a directory: use ls", req.Path)
	}

	return sendChunks(f, srv.Send, func(err error) error {
		return status.Errorf(codes.Internal, "reading %s: %v", req.Path, err)
	})
}

// sendChunks streams r as common.Data messages of up to 64 KiB until EOF. A read error is
// returned through readErr; a send error as it is.
func sendChunks(r io.Reader, send func(*common.Data) error, readErr func(error) error) error {
	buf := make([]byte, 64<<10)

	for {
		n, err := r.Read(buf)
		if n > 0 {
			if sendErr := send(&common.Data{Bytes: append([]byte(nil), buf[:n]...)}); sendErr != nil {
				return sendErr
			}
		}

		if errors.Is(err, io.EOF) {
			return nil
		}

		if err != nil {
			return readErr(err)
		}
	}
}
