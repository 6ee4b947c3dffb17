// Package imager builds the node's images. The node rootfs (rootfs.go) is a reproducible
// squashfs: machined as /sbin/init, etcd, the pinned containerd, runc and CNI plugins, Debian's
// iptables and nftables with their libraries, and /etc. The signed image (this file) is one
// file (a gzip-compressed tar) holding the multi-call binary, the etcd binary, optionally the
// rootfs (rootfs.sqsh), and a manifest with the version and each file's size and sha256, signed
// with ed25519.
//
// Layout of an image, in this order:
//
//	manifest.json   the Manifest, as JSON
//	manifest.sig    the Signature: ed25519 over the exact bytes of manifest.json
//	machined        the multi-call binary
//	etcd            the etcd binary
//
// A node checks the signature against its trusted keys before it reads anything else, then
// checks every file against the manifest as it is written; an image with a missing, extra,
// resized or altered file is refused and nothing is left behind.
package imager

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"time"
)

// Format is the manifest format this package writes and reads.
const Format = "talos-go-image/v1"

// Names of the entries of an image (and of the files of an unpacked slot).
const (
	ManifestName  = "manifest.json"
	SignatureName = "manifest.sig"
	MachinedName  = "machined"
	EtcdName      = "etcd"
	// RootfsName is the node rootfs (a squashfs) an image may carry for container-mode nodes.
	RootfsName = "rootfs.sqsh"
)

// The files of a metal image: what GRUB boots from a slot of BOOT.
const (
	VmlinuzName   = "vmlinuz"
	InitramfsName = "initramfs.img"
)

// RequiredFiles are the payload files every image for process nodes holds.
var RequiredFiles = []string{MachinedName, EtcdName}

// MetalFiles are the payload files of a metal image (the node image is inside the initramfs).
var MetalFiles = []string{VmlinuzName, InitramfsName}

// Metal reports whether the image is a metal node's kernel and initramfs.
func (m *Manifest) Metal() bool {
	_, ok := m.file(VmlinuzName)

	return ok
}

// required are the files an image with the given files must hold: a metal image's when it
// has a kernel, else a process node's.
func required(has func(string) bool) []string {
	if has(VmlinuzName) || has(InitramfsName) {
		return MetalFiles
	}

	return RequiredFiles
}

// maxMetaSize bounds manifest.json and manifest.sig so a hostile image cannot exhaust memory.
const maxMetaSize = 1 << 20

// Manifest describes an image.
type Manifest struct {
	Format  string `json:"format"`
	Version string `json:"version"`
	Arch    string `json:"arch"`
	Created string `json:"created"`
	Files   []File `json:"files"`
	// Schematic is the ID of the schematic the image carries as schematic.yaml (none: empty).
	Schematic string `json:"schematic,omitempty"`
}

// File is one payload file of an image.
type File struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	Mode   uint32 `json:"mode"`
}

// Signature is manifest.sig.
type Signature struct {
	KeyID     string `json:"keyID"`
	Signature string `json:"signature"` // base64 of the ed25519 signature of manifest.json
}

var versionRE = regexp.MustCompile(`^v?[0-9]+\.[0-9]+\.[0-9]+([-+.][0-9A-Za-z.+-]*)?$`)

// CheckVersion refuses a version that is not a semantic version like v1.11.1.
func CheckVersion(v string) error {
	if !versionRE.MatchString(v) {
		return fmt.Errorf("version %q is not a version like v1.11.1: set VERSION=vMAJOR.MINOR.PATCH", v)
	}

	return nil
}

func (m *Manifest) file(name string) (File, bool) {
	for _, f := range m.Files {
		if f.Name == name {
			return f, true
		}
	}

	return File{}, false
}

// check validates the manifest's own fields.
func (m *Manifest) check() error {
	if m.Format != Format {
		return fmt.Errorf("manifest format %q is not %q: the image was built by an incompatible imager", m.Format, Format)
	}

	if err := CheckVersion(m.Version); err != nil {
		return fmt.Errorf("manifest: %w", err)
	}

	seen := map[string]bool{}

	for _, f := range m.Files {
		if !validName(f.Name) {
			return fmt.Errorf("manifest lists file %q: only plain names like machined or etcd are allowed", f.Name)
		}

		if seen[f.Name] {
			return fmt.Errorf("manifest lists file %q twice", f.Name)
		}

		seen[f.Name] = true

		if f.Size < 0 || len(f.SHA256) != sha256.Size*2 {
			return fmt.Errorf("manifest entry for %q has no valid size and sha256", f.Name)
		}
	}

	for _, name := range required(func(n string) bool { return seen[n] }) {
		if !seen[name] {
			return fmt.Errorf("manifest has no %q: an image must hold machined and etcd, or a metal node's vmlinuz and initramfs.img", name)
		}
	}

	if seen[SchematicName] != (m.Schematic != "") {
		return fmt.Errorf("manifest: schematic ID %q and %s listed: %v: the image was altered or built by an incompatible imager", m.Schematic, SchematicName, seen[SchematicName])
	}

	return nil
}

func validName(name string) bool {
	return name != "" && name != "." && name != ".." && filepath.Base(name) == name &&
		name != ManifestName && name != SignatureName
}

// BuildOptions are the inputs of an image.
type BuildOptions struct {
	Version  string
	Arch     string            // defaults to this build's GOARCH
	Files    map[string]string // image name -> path on disk; must include machined and etcd
	Key      ed25519.PrivateKey
	Created  time.Time // defaults to now
	Compress bool
}

// Build writes an image to w.
func Build(w io.Writer, opts BuildOptions) (*Manifest, error) {
	if err := CheckVersion(opts.Version); err != nil {
		return nil, err
	}

	if len(opts.Key) != ed25519.PrivateKeySize {
		return nil, errors.New("no signing key: generate one with `imager keygen` and pass it with --key")
	}

	if opts.Arch == "" {
		opts.Arch = runtime.GOARCH
	}

	if opts.Created.IsZero() {
		opts.Created = time.Now()
	}

	m := &Manifest{Format: Format, Version: opts.Version, Arch: opts.Arch, Created: opts.Created.UTC().Format(time.RFC3339)}

	files, err := manifestFiles(opts.Files)
	if err != nil {
		return nil, err
	}

	m.Files = files

	if m.Schematic, err = schematicID(opts.Files); err != nil {
		return nil, err
	}

	manifest, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}

	pub, _ := opts.Key.Public().(ed25519.PublicKey) // an ed25519 private key's public half

	sig, err := json.Marshal(Signature{
		KeyID:     KeyID(pub),
		Signature: base64.StdEncoding.EncodeToString(ed25519.Sign(opts.Key, manifest)),
	})
	if err != nil {
		return nil, err
	}

	var (
		gz *gzip.Writer
		tw *tar.Writer
	)

	if opts.Compress {
		gz = gzip.NewWriter(w)
		tw = tar.NewWriter(gz)
	} else {
		tw = tar.NewWriter(w)
	}

	put := func(name string, mode int64, size int64, r io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: size, ModTime: opts.Created, Typeflag: tar.TypeReg}); err != nil {
			return err
		}

		_, err := io.Copy(tw, r)

		return err
	}

	if err = put(ManifestName, 0o644, int64(len(manifest)), bytes.NewReader(manifest)); err != nil {
		return nil, err
	}

	if err = put(SignatureName, 0o644, int64(len(sig)), bytes.NewReader(sig)); err != nil {
		return nil, err
	}

	for _, f := range m.Files {
		if err = copyChecked(opts.Files[f.Name], f, func(r io.Reader) error { return put(f.Name, int64(f.Mode), f.Size, r) }); err != nil {
			return nil, err
		}
	}

	if err = tw.Close(); err != nil {
		return nil, err
	}

	if gz != nil {
		if err = gz.Close(); err != nil {
			return nil, err
		}
	}

	return m, nil
}

// manifestFiles are the manifest's entries of files (image name -> path on disk): the required
// files first, then the others by name, each with its digest, size and mode.
func manifestFiles(files map[string]string) ([]File, error) {
	var out []File

	req := required(func(n string) bool { _, ok := files[n]; return ok })
	names := append([]string{}, req...)

	for name := range files {
		if !slices.Contains(req, name) {
			names = append(names, name)
		}
	}

	slices.Sort(names[len(req):])

	for _, name := range names {
		path, ok := files[name]
		if !ok {
			return nil, fmt.Errorf("no %s given: an image holds machined and etcd, or a metal node's vmlinuz and initramfs.img", name)
		}

		if !validName(name) {
			return nil, fmt.Errorf("image file name %q: only plain names are allowed", name)
		}

		sum, size, mode, err := digestFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading %s for the image: %w", name, err)
		}

		out = append(out, File{Name: name, Size: size, SHA256: sum, Mode: mode})
	}

	return out, nil
}

// schematicID is the ID of the schematic among an image's files ("" when there is none),
// checked as `imager build --schematic` checks it.
func schematicID(files map[string]string) (string, error) {
	path, ok := files[SchematicName]
	if !ok {
		return "", nil
	}

	s, err := LoadSchematic(path)
	if err != nil {
		return "", err
	}

	if _, metal := files[VmlinuzName]; !metal && len(s.Customization.ExtraKernelArgs) > 0 {
		return "", errors.New("schematic: customization.extraKernelArgs is for metal images (--vmlinuz, --initramfs): a process or container node boots no kernel of its own")
	}

	return s.ID()
}

// copyChecked streams a source file and makes sure it did not change since it was digested.
func copyChecked(path string, f File, fn func(io.Reader) error) error {
	src, err := os.Open(path)
	if err != nil {
		return err
	}
	defer src.Close()

	h := sha256.New()
	if err = fn(io.TeeReader(io.LimitReader(src, f.Size), h)); err != nil {
		return fmt.Errorf("adding %s: %w", f.Name, err)
	}

	if hex.EncodeToString(h.Sum(nil)) != f.SHA256 {
		return fmt.Errorf("%s changed while the image was being built: build again", path)
	}

	return nil
}

// BuildFile writes an image to path atomically (a failed build leaves no partial file).
func BuildFile(path string, opts BuildOptions) (*Manifest, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return nil, fmt.Errorf("creating image %s: %w", path, err)
	}

	defer os.Remove(tmp.Name())

	m, err := Build(tmp, opts)
	if err == nil {
		err = tmp.Sync()
	}

	if cerr := tmp.Close(); err == nil {
		err = cerr
	}

	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}

	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}

	if err != nil {
		return nil, fmt.Errorf("building image %s: %w", path, err)
	}

	return m, nil
}

func digestFile(path string) (string, int64, uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, 0, err
	}
	defer f.Close()

	fi, err := f.Stat()
	if err != nil {
		return "", 0, 0, err
	}

	if !fi.Mode().IsRegular() {
		return "", 0, 0, fmt.Errorf("%s is not a regular file", path)
	}

	h := sha256.New()

	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, 0, err
	}

	return hex.EncodeToString(h.Sum(nil)), n, 0o755, nil
}
