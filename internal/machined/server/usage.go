package server

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DiskUsage reports the size of each requested path, and of what is below it down to the
// requested depth, children before their folder (as du prints them). Sizes are the bytes of
// the regular files below an entry.
func (s *Machine) DiskUsage(req *machine.DiskUsageRequest, srv grpc.ServerStreamingServer[machine.DiskUsageInfo]) error {
	paths := req.Paths
	if len(paths) == 0 {
		paths = []string{"/"}
	}

	md := s.metadata(srv.Context())

	for _, nodePath := range paths {
		hostRoot, err := s.hostPath(nodePath)
		if err != nil {
			return err
		}

		u := usageWalk{req: req, md: md, send: srv.Send}

		if _, err = u.walk(hostRoot, path.Clean(nodePath), 0); err != nil {
			return err
		}
	}

	return nil
}

type usageWalk struct {
	req  *machine.DiskUsageRequest
	md   *common.Metadata
	send func(*machine.DiskUsageInfo) error
}

// walk returns the size of hostPath and everything below it, sending the entries within the
// requested depth (0 is the requested path itself).
func (u *usageWalk) walk(hostPath, nodePath string, depth int32) (int64, error) {
	// An unreadable entry is reported (whatever its size) and counts as empty.
	fail := func(err error) (int64, error) {
		return 0, u.report(&machine.DiskUsageInfo{Metadata: u.md, Name: nodePath, RelativeName: nodePath, Error: nodeError(nodePath, err)}, depth, true)
	}

	fi, err := os.Lstat(hostPath)
	if err != nil {
		return fail(err)
	}

	var size int64

	switch {
	case fi.Mode().IsRegular():
		size = fi.Size()
	case fi.IsDir():
		entries, err := os.ReadDir(hostPath)
		if err != nil {
			return fail(err)
		}

		for _, e := range entries {
			n, err := u.walk(filepath.Join(hostPath, e.Name()), path.Join(nodePath, e.Name()), depth+1)
			if err != nil {
				return 0, err
			}

			size += n
		}
	}

	if !fi.IsDir() && !u.req.All && depth > 0 {
		return size, nil
	}

	return size, u.report(&machine.DiskUsageInfo{Metadata: u.md, Name: nodePath, RelativeName: nodePath, Size: size}, depth, false)
}

// nodeError names the node's path, not the host folder behind it.
func nodeError(nodePath string, err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return nodePath + ": " + pe.Err.Error()
	}

	return nodePath + ": " + err.Error()
}

// report sends an entry that is within the depth and passes the threshold.
func (u *usageWalk) report(info *machine.DiskUsageInfo, depth int32, failed bool) error {
	if u.req.RecursionDepth > 0 && depth >= u.req.RecursionDepth {
		return nil
	}

	if t := u.req.Threshold; !failed && ((t > 0 && info.Size < t) || (t < 0 && info.Size > -t)) {
		return nil
	}

	return u.send(info)
}

// Copy streams a .tar.gz of a file or folder of the node. Entries are named from the copied
// path's last element (copying /var/log gives log/...); symlinks are kept as links, sockets
// and devices are left out.
func (s *Machine) Copy(req *machine.CopyRequest, srv grpc.ServerStreamingServer[common.Data]) error {
	hostRoot, err := s.hostPath(req.RootPath)
	if err != nil {
		return err
	}

	if _, err = os.Lstat(hostRoot); errors.Is(err, os.ErrNotExist) {
		return status.Errorf(codes.NotFound, "%s: no such file or folder", req.RootPath)
	}

	pr, pw := io.Pipe()

	go func() {
		pw.CloseWithError(writeArchive(pw, walkRoot(hostRoot), path.Base(path.Clean(req.RootPath))))
	}()

	defer pr.Close()

	return sendChunks(pr, srv.Send, func(err error) error {
		return status.Errorf(codes.Internal, "archiving %s: %v", req.RootPath, err)
	})
}

// writeArchive writes hostRoot as a gzipped tar whose entries start with name.
func writeArchive(w io.Writer, hostRoot, name string) error {
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)

	err := filepath.WalkDir(hostRoot, func(p string, d fs.DirEntry, walkErr error) error {
		// Kernel filesystems change under the walk (processes end) and hold entries nobody
		// may read: there such errors skip the entry instead of failing the copy.
		if walkErr != nil {
			if skippable(walkErr) && pseudoFS(filepath.Dir(p)) {
				return nil
			}

			return walkErr
		}

		fi, err := d.Info()
		if err != nil {
			if skippable(err) && pseudoFS(filepath.Dir(p)) {
				return nil
			}

			return err
		}

		rel, _ := filepath.Rel(hostRoot, p)
		entry := path.Join(name, filepath.ToSlash(rel))

		var link string

		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case !fi.Mode().IsRegular() && !fi.IsDir():
			return nil // sockets, pipes and devices have no content to copy
		}

		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}

		hdr.Name = entry
		if fi.IsDir() {
			hdr.Name += "/"
		}

		if fi.Mode().IsRegular() && pseudoFS(p) {
			// The size a kernel file reports is not its content's: read it to know.
			content := readPseudo(p)
			hdr.Size = int64(len(content))

			if err = tw.WriteHeader(hdr); err != nil {
				return err
			}

			_, err = tw.Write(content)

			return err
		}

		if err = tw.WriteHeader(hdr); err != nil {
			return err
		}

		if !fi.Mode().IsRegular() {
			return nil
		}

		f, err := os.Open(p) //nolint:gosec // reads sizes only: a swapped link changes a number, exposes nothing
		if err != nil {
			return err
		}
		defer f.Close()

		// A file that changes while it is copied keeps the size in its header: a growing
		// log is cut there, a shrinking one is padded with zeros.
		n, err := io.Copy(tw, io.LimitReader(f, hdr.Size))
		if err != nil {
			return err
		}

		_, err = io.CopyN(tw, zeros{}, hdr.Size-n)

		return err
	})
	if err != nil {
		return err
	}

	if err = tw.Close(); err != nil {
		return err
	}

	return gz.Close()
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)

	return len(p), nil
}
