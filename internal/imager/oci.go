package imager

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ImageSpec describes a one-layer container image made from files of this machine: the node
// image's cache holds the system and Kubernetes images in this form, so nothing is pulled.
type ImageSpec struct {
	Ref        string      // the image's name and tag, e.g. registry.k8s.io/pause:3.10
	Files      []ImageFile // the layer's contents; parent folders are added as needed
	Base       []ImageFile // optional first layer, stored once in an archive of images sharing it
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	User       string // the user the image runs as (e.g. 1234); empty: root
}

// ImageFile is one entry of an image's layer: a copy of Source, a symlink to Link, a file
// holding Data, or (with none of them) an empty folder.
type ImageFile struct {
	Path   string // absolute path in the image
	Source string // file on this machine to copy
	Link   string // symlink target
	Data   []byte // the file's content, for small files made here
	Mode   int64  // permission bits; 0 means 0o755 for folders and binaries, else Source's
}

// WriteImageArchive writes the image as a docker-format archive (what `ctr image import` and
// containerd's Import read). Same inputs give the same bytes: entries are sorted, owned by root
// and dated at the epoch, and the image has no creation time.
func WriteImageArchive(out string, spec ImageSpec) error {
	ref, err := name.ParseReference(spec.Ref)
	if err != nil {
		return fmt.Errorf("image %q: %w", spec.Ref, err)
	}

	layerTar, err := imageLayer(spec.Files)
	if err != nil {
		return fmt.Errorf("image %s: %w", spec.Ref, err)
	}

	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return err
	}

	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}

	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}

	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config = v1.Config{Entrypoint: spec.Entrypoint, Cmd: spec.Cmd, Env: spec.Env, WorkingDir: spec.WorkingDir, User: spec.User}

	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}

	return tarball.WriteToFile(out, ref, img)
}

// imageLayer builds the layer's tar: every file with its parent folders, sorted by path.
func imageLayer(files []ImageFile) ([]byte, error) {
	entries := map[string]ImageFile{}

	for _, f := range files {
		if !path.IsAbs(f.Path) {
			return nil, fmt.Errorf("file %q: the path in the image must be absolute", f.Path)
		}

		p := strings.TrimPrefix(path.Clean(f.Path), "/")
		if p == "" {
			return nil, errors.New("file \"/\": name a path below the root")
		}

		entries[p] = f

		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if _, ok := entries[dir]; !ok {
				entries[dir] = ImageFile{Path: "/" + dir}
			}
		}
	}

	names := make([]string, 0, len(entries))
	for p := range entries {
		names = append(names, p)
	}

	sort.Strings(names)

	var buf bytes.Buffer

	tw := tar.NewWriter(&buf)

	for _, p := range names {
		if err := writeEntry(tw, p, entries[p]); err != nil {
			return nil, err
		}
	}

	if err := tw.Close(); err != nil {
		return nil, err
	}

	return buf.Bytes(), nil
}

func writeEntry(tw *tar.Writer, p string, f ImageFile) error {
	hdr := &tar.Header{Name: p, Mode: f.Mode, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}

	switch {
	case f.Link != "":
		hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, f.Link, 0o777

		return tw.WriteHeader(hdr)
	case f.Source == "" && f.Data != nil:
		if hdr.Mode == 0 {
			hdr.Mode = 0o644
		}

		hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(f.Data))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}

		_, err := tw.Write(f.Data)

		return err
	case f.Source == "":
		hdr.Typeflag, hdr.Name = tar.TypeDir, p+"/"
		if hdr.Mode == 0 {
			hdr.Mode = 0o755
		}

		return tw.WriteHeader(hdr)
	}

	data, err := os.ReadFile(f.Source)
	if err != nil {
		return fmt.Errorf("file %s: %w", f.Path, err)
	}

	if hdr.Mode == 0 {
		st, err := os.Stat(f.Source)
		if err != nil {
			return err
		}

		hdr.Mode = int64(st.Mode().Perm())
	}

	hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(data))

	if err = tw.WriteHeader(hdr); err != nil {
		return err
	}

	_, err = tw.Write(data)

	return err
}
