package imager

import (
	"archive/tar"
	"bufio"
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
	"strings"
)

// ErrRefused marks every reason an image is refused (bad signature, altered content, damaged
// file); callers map it to InvalidArgument.
var ErrRefused = errors.New("image refused")

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
}

// Verify reads a whole image and checks its signature against keys and every file against the
// manifest. Nothing is written.
func Verify(r io.Reader, keys []ed25519.PublicKey) (*Manifest, error) {
	return read(r, keys, func(File, io.Reader) error { return nil })
}

// VerifyFile is Verify on a file.
func VerifyFile(path string, keys []ed25519.PublicKey) (*Manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening image: %w", err)
	}
	defer f.Close()

	return Verify(f, keys)
}

// Extract verifies the image at path and unpacks it into dest, which must not exist. The files
// are written into a temporary folder next to dest, checked, synced and renamed to dest in one
// step; a refused or damaged image leaves nothing behind.
func Extract(path string, keys []ed25519.PublicKey, dest string) (*Manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening image: %w", err)
	}
	defer f.Close()

	return ExtractFrom(f, keys, dest)
}

// ExtractFrom is Extract on a stream (an image being downloaded): it is checked as it is read,
// so the image is never stored whole before its files.
func ExtractFrom(f io.Reader, keys []ed25519.PublicKey, dest string) (*Manifest, error) {
	if _, err := os.Lstat(dest); err == nil {
		return nil, fmt.Errorf("unpacking image: %s already exists", dest)
	}

	tmp, err := os.MkdirTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".tmp-")
	if err != nil {
		return nil, fmt.Errorf("unpacking image: %w", err)
	}

	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()

	var manifestRaw, sigRaw []byte

	m, err := readRaw(f, keys, func(raw, sig []byte) { manifestRaw, sigRaw = raw, sig }, func(file File, r io.Reader) error {
		return writeSynced(filepath.Join(tmp, file.Name), os.FileMode(file.Mode&0o755)|0o500, r)
	})
	if err != nil {
		return nil, err
	}

	if err = writeSynced(filepath.Join(tmp, ManifestName), 0o644, strings.NewReader(string(manifestRaw))); err != nil {
		return nil, err
	}

	if err = writeSynced(filepath.Join(tmp, SignatureName), 0o644, strings.NewReader(string(sigRaw))); err != nil {
		return nil, err
	}

	if err = syncDir(tmp); err != nil {
		return nil, err
	}

	if err = os.Rename(tmp, dest); err != nil {
		return nil, fmt.Errorf("unpacking image: %w", err)
	}

	ok = true

	return m, syncDir(filepath.Dir(dest))
}

// VerifyDir checks an unpacked image (a boot slot): the manifest's signature and every file's
// size and digest. Extra files are not allowed either.
func VerifyDir(dir string, keys []ed25519.PublicKey) (*Manifest, error) {
	raw, err := readSmall(filepath.Join(dir, ManifestName))
	if err != nil {
		return nil, refused("slot %s has no readable manifest: %v", dir, err)
	}

	sig, err := readSmall(filepath.Join(dir, SignatureName))
	if err != nil {
		return nil, refused("slot %s has no readable signature: %v", dir, err)
	}

	m, err := checkManifest(raw, sig, keys)
	if err != nil {
		return nil, err
	}

	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}

	for _, e := range entries {
		if e.Name() == ManifestName || e.Name() == SignatureName {
			continue
		}

		if _, ok := m.file(e.Name()); !ok {
			return nil, refused("slot %s holds %q, which its manifest does not list", dir, e.Name())
		}
	}

	for _, file := range m.Files {
		sum, size, _, err := digestFile(filepath.Join(dir, file.Name))
		if err != nil {
			return nil, refused("slot %s: %v", dir, err)
		}

		if size != file.Size || sum != file.SHA256 {
			return nil, refused("slot %s: %s does not match its manifest digest (altered or damaged on disk)", dir, file.Name)
		}
	}

	return m, nil
}

// ReadManifest reads a slot's manifest without checking anything (for display).
func ReadManifest(dir string) (*Manifest, error) {
	raw, err := readSmall(filepath.Join(dir, ManifestName))
	if err != nil {
		return nil, err
	}

	var m Manifest
	if err = json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", dir, err)
	}

	return &m, nil
}

func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()

	data, err := io.ReadAll(io.LimitReader(f, maxMetaSize+1))
	if err != nil {
		return nil, err
	}

	if len(data) > maxMetaSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxMetaSize)
	}

	return data, nil
}

func read(r io.Reader, keys []ed25519.PublicKey, onFile func(File, io.Reader) error) (*Manifest, error) {
	return readRaw(r, keys, func([]byte, []byte) {}, onFile)
}

// readRaw walks an image: manifest, signature (checked before anything else is read), then
// each payload file, streamed through onFile while its digest is computed.
func readRaw(r io.Reader, keys []ed25519.PublicKey, onManifest func(raw, sig []byte), onFile func(File, io.Reader) error) (*Manifest, error) {
	if len(keys) == 0 {
		return nil, errors.New("no trusted image keys on this node: start the node with `machined boot --image-keys FILE.pub` (imager keygen writes it), or build the node with trusted keys")
	}

	br := bufio.NewReader(r)

	var src io.Reader = br

	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, refused("not a valid image (gzip): %v", err)
		}
		defer gz.Close()

		src = gz
	}

	tr := tar.NewReader(src)

	t := imageTar{tr}

	h, err := t.next(ManifestName)
	if err != nil {
		return nil, err
	}

	raw, err := t.entry(h)
	if err != nil {
		return nil, err
	}

	h, err = t.next(SignatureName)
	if err != nil {
		return nil, err
	}

	sig, err := t.entry(h)
	if err != nil {
		return nil, err
	}

	m, err := checkManifest(raw, sig, keys)
	if err != nil {
		return nil, err
	}

	onManifest(raw, sig)

	seen := map[string]bool{}

	for {
		h, err = t.next("")
		if errors.Is(err, io.EOF) {
			break
		}

		if err != nil {
			return nil, err
		}

		file, ok := m.file(h.Name)
		if !ok {
			return nil, refused("image holds %q, which its signed manifest does not list: the image was altered", h.Name)
		}

		if seen[h.Name] {
			return nil, refused("image holds %q twice: the image was altered", h.Name)
		}

		seen[h.Name] = true

		if h.Size != file.Size {
			return nil, refused("%s is %d bytes but the signed manifest says %d: the image was altered", h.Name, h.Size, file.Size)
		}

		if err = t.payload(h, file, onFile); err != nil {
			return nil, err
		}
	}

	for _, file := range m.Files {
		if !seen[file.Name] {
			return nil, refused("image lacks %q, which its manifest lists: the image is truncated", file.Name)
		}
	}

	return m, nil
}

// imageTar reads an image's tar entries, refusing what an image built by imager does not hold.
type imageTar struct{ tr *tar.Reader }

// next is the next entry, a regular file named want (any name when want is "", and io.EOF at
// the end).
func (t imageTar) next(want string) (*tar.Header, error) {
	h, err := t.tr.Next()
	if errors.Is(err, io.EOF) {
		if want == "" {
			return nil, io.EOF
		}

		return nil, refused("image ends before %s: the file is truncated or is not an image", want)
	}

	if err != nil {
		return nil, refused("not a valid image (tar): %v", err)
	}

	if h.Typeflag != tar.TypeReg {
		return nil, refused("image entry %q is not a regular file", h.Name)
	}

	if want != "" && h.Name != want {
		if want == SignatureName {
			return nil, refused("image is not signed (found %q where %s should be): sign it with `imager build --key`", h.Name, SignatureName)
		}

		return nil, refused("image starts with %q instead of %s: not an image built by imager", h.Name, want)
	}

	return h, nil
}

// entry reads the metadata entry h (the manifest, the signature): at most maxMetaSize bytes.
func (t imageTar) entry(h *tar.Header) ([]byte, error) {
	if h.Size > maxMetaSize {
		return nil, refused("%s is %d bytes, more than the %d allowed", h.Name, h.Size, maxMetaSize)
	}

	data, err := io.ReadAll(t.tr)
	if err != nil {
		return nil, refused("reading %s: %v", h.Name, err)
	}

	return data, nil
}

// payload streams the payload entry h through onFile and checks it against file, its signed
// manifest's entry.
func (t imageTar) payload(h *tar.Header, file File, onFile func(File, io.Reader) error) error {
	hash := sha256.New()
	body := &readErr{r: io.TeeReader(t.tr, hash)}

	if err := onFile(file, body); err != nil {
		// A stream that breaks while the file is read (a flipped byte in the compressed
		// data) is the image's fault; anything else (a full disk) is the writer's.
		if body.err != nil && !errors.Is(body.err, io.EOF) {
			return refused("reading %s: %v: the image was altered or damaged", h.Name, body.err)
		}

		return fmt.Errorf("unpacking %s: %w", h.Name, err)
	}

	// onFile may stop early; drain so the digest covers the whole entry.
	if _, err := io.Copy(hash, t.tr); err != nil {
		return refused("reading %s: %v", h.Name, err)
	}

	if hex.EncodeToString(hash.Sum(nil)) != file.SHA256 {
		return refused("%s does not match its sha256 in the signed manifest: the image was altered or damaged", h.Name)
	}

	return nil
}

// checkManifest verifies the signature over raw, then parses and validates the manifest.
func checkManifest(raw, sigRaw []byte, keys []ed25519.PublicKey) (*Manifest, error) {
	if len(keys) == 0 {
		return nil, errors.New("no trusted image keys on this node: start the node with `machined boot --image-keys FILE.pub` (imager keygen writes it), or build the node with trusted keys")
	}

	var sig Signature
	if err := json.Unmarshal(sigRaw, &sig); err != nil {
		return nil, refused("signature is not readable: %v", err)
	}

	sigBytes, err := base64.StdEncoding.DecodeString(sig.Signature)
	if err != nil || len(sigBytes) != ed25519.SignatureSize {
		return nil, refused("signature is not a valid ed25519 signature")
	}

	trusted := false
	ids := make([]string, 0, len(keys))

	for _, k := range keys {
		ids = append(ids, KeyID(k))

		if ed25519.Verify(k, raw, sigBytes) {
			trusted = true

			break
		}
	}

	if !trusted {
		return nil, refused("signature does not verify with any trusted key (image signed by key %s, node trusts %s): the image was altered or signed with another key; sign it with a trusted key", sig.KeyID, strings.Join(ids, ", "))
	}

	var m Manifest
	if err = json.Unmarshal(raw, &m); err != nil {
		return nil, refused("manifest is not readable: %v", err)
	}

	if err = m.check(); err != nil {
		return nil, refused("%v", err)
	}

	return &m, nil
}

func writeSynced(path string, mode os.FileMode, r io.Reader) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}

	if _, err = io.Copy(f, r); err != nil {
		f.Close()

		return err
	}

	if err = f.Sync(); err != nil {
		f.Close()

		return err
	}

	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()

	return d.Sync()
}

// readErr remembers the error its reader returned.
type readErr struct {
	r   io.Reader
	err error
}

func (e *readErr) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil {
		e.err = err
	}

	return n, err
}
