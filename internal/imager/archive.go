package imager

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// WriteImagesArchive writes several images into one docker-format archive. A layer several
// images share (the same files, so the same digest: the multi-call Kubernetes binary, the
// iptables userland) is stored once, and layers are stored uncompressed, so the squashfs that
// carries the archive compresses them. Same inputs give the same bytes. It returns each image's
// size: its config and layers, shared ones counted in full.
func WriteImagesArchive(out string, specs ...ImageSpec) (map[string]int64, error) {
	layers := map[string]archiveBlob{} // by the layer's file list, so a shared layer is built once
	sizes := map[string]int64{}

	var (
		manifest []archiveManifest
		blobs    []archiveBlob
		written  = map[string]bool{}
	)

	add := func(b archiveBlob) {
		if !written[b.name] {
			written[b.name] = true
			blobs = append(blobs, b)
		}
	}

	for _, spec := range specs {
		ref, err := name.ParseReference(spec.Ref)
		if err != nil {
			return nil, fmt.Errorf("image %q: %w", spec.Ref, err)
		}

		m := archiveManifest{RepoTags: []string{ref.Name()}}
		cf := v1.ConfigFile{OS: "linux", Architecture: "amd64", RootFS: v1.RootFS{Type: "layers"},
			Config: v1.Config{Entrypoint: spec.Entrypoint, Cmd: spec.Cmd, Env: spec.Env, WorkingDir: spec.WorkingDir, User: spec.User}}

		for _, files := range spec.layers() {
			l, err := memoLayer(layers, files)
			if err != nil {
				return nil, fmt.Errorf("image %s: %w", spec.Ref, err)
			}

			add(l)
			m.Layers = append(m.Layers, l.name)
			cf.RootFS.DiffIDs = append(cf.RootFS.DiffIDs, l.digest)
			sizes[spec.Ref] += int64(len(l.data))
		}

		config, err := json.Marshal(cf)
		if err != nil {
			return nil, err
		}

		sum := sha256.Sum256(config)
		c := archiveBlob{name: hex.EncodeToString(sum[:]) + ".json", data: config}
		add(c)

		m.Config = c.name
		sizes[spec.Ref] += int64(len(config))
		manifest = append(manifest, m)
	}

	return sizes, writeArchive(out, manifest, blobs)
}

// layers are the image's file lists, base first.
func (s ImageSpec) layers() [][]ImageFile {
	if len(s.Base) == 0 {
		return [][]ImageFile{s.Files}
	}

	if len(s.Files) == 0 {
		return [][]ImageFile{s.Base}
	}

	return [][]ImageFile{s.Base, s.Files}
}

// archiveManifest is one entry of a docker archive's manifest.json.
type archiveManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

type archiveBlob struct {
	name   string
	data   []byte  // a config, or an uncompressed layer
	digest v1.Hash // a layer's diff ID
}

func memoLayer(memo map[string]archiveBlob, files []ImageFile) (archiveBlob, error) {
	key, _ := json.Marshal(files)
	if l, ok := memo[string(key)]; ok {
		return l, nil
	}

	data, err := imageLayer(files)
	if err != nil {
		return archiveBlob{}, err
	}

	sum := sha256.Sum256(data)
	l := archiveBlob{name: hex.EncodeToString(sum[:]) + ".tar", data: data, digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}}
	memo[string(key)] = l

	return l, nil
}

// writeArchive writes the blobs, then manifest.json, through a temporary file, so a build that
// fails leaves no half archive behind.
func writeArchive(out string, manifest []archiveManifest, blobs []archiveBlob) error {
	f, err := os.CreateTemp(filepath.Dir(out), ".archive-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()

	tw := tar.NewWriter(f)

	put := func(name string, size int64, r io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return err
		}

		_, err := io.Copy(tw, r)

		return err
	}

	for _, b := range blobs {
		if err = put(b.name, int64(len(b.data)), bytes.NewReader(b.data)); err != nil {
			return fmt.Errorf("writing %s: %w", b.name, err)
		}
	}

	mf, err := json.Marshal(manifest)
	if err != nil {
		return err
	}

	if err = put("manifest.json", int64(len(mf)), bytes.NewReader(mf)); err != nil {
		return err
	}

	if err = tw.Close(); err != nil {
		return err
	}

	if err = f.Close(); err != nil {
		return err
	}

	return os.Rename(f.Name(), out)
}
