package imager

import (
	"archive/tar"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type fixture struct {
	dir   string
	priv  ed25519.PrivateKey
	pub   ed25519.PublicKey
	files map[string]string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()

	dir := t.TempDir()

	pub, err := GenerateKey(filepath.Join(dir, "k.key"), filepath.Join(dir, "k.pub"))
	if err != nil {
		t.Fatal(err)
	}

	priv, err := LoadPrivateKey(filepath.Join(dir, "k.key"))
	if err != nil {
		t.Fatal(err)
	}

	f := &fixture{dir: dir, priv: priv, pub: pub, files: map[string]string{}}

	for name, content := range map[string]string{MachinedName: "machined binary v2", EtcdName: "etcd binary"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}

		f.files[name] = p
	}

	return f
}

func (f *fixture) build(t *testing.T, compress bool) []byte {
	t.Helper()

	var buf bytes.Buffer
	if _, err := Build(&buf, BuildOptions{Version: "v1.11.1", Key: f.priv, Files: f.files, Compress: compress}); err != nil {
		t.Fatal(err)
	}

	return buf.Bytes()
}

func TestKeyFiles(t *testing.T) {
	f := newFixture(t)

	fi, err := os.Stat(filepath.Join(f.dir, "k.key"))
	if err != nil {
		t.Fatal(err)
	}

	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("private key mode %v, want 0600", fi.Mode().Perm())
	}

	if _, err = GenerateKey(filepath.Join(f.dir, "k.key"), filepath.Join(f.dir, "other.pub")); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("overwriting a key: got %v", err)
	}

	keys, err := LoadPublicKeys(filepath.Join(f.dir, "k.pub"))
	if err != nil || len(keys) != 1 || !keys[0].Equal(f.pub) {
		t.Fatalf("public key round trip: %v %v", keys, err)
	}

	// A private key handed to a node as trusted key is refused.
	if _, err = LoadPublicKeys(filepath.Join(f.dir, "k.key")); err == nil {
		t.Fatal("private key accepted as a public key")
	}

	if err = os.Chmod(filepath.Join(f.dir, "k.key"), 0o644); err != nil {
		t.Fatal(err)
	}

	if _, err = LoadPrivateKey(filepath.Join(f.dir, "k.key")); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable private key: got %v", err)
	}
}

func TestVerifyGood(t *testing.T) {
	f := newFixture(t)

	for _, compress := range []bool{false, true} {
		m, err := Verify(bytes.NewReader(f.build(t, compress)), []ed25519.PublicKey{f.pub})
		if err != nil {
			t.Fatalf("compress=%v: %v", compress, err)
		}

		if m.Version != "v1.11.1" || len(m.Files) != 2 {
			t.Fatalf("manifest: %+v", m)
		}
	}
}

// rewrite rebuilds an uncompressed image, letting edit change each entry.
func rewrite(t *testing.T, img []byte, edit func(name string, data []byte) (string, []byte, bool)) []byte {
	t.Helper()

	tr := tar.NewReader(bytes.NewReader(img))

	var out bytes.Buffer

	tw := tar.NewWriter(&out)

	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}

		if err != nil {
			t.Fatal(err)
		}

		data, _ := io.ReadAll(tr)

		name, data, keep := edit(h.Name, data)
		if !keep {
			continue
		}

		if err = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}

		tw.Write(data)
	}

	tw.Close()

	return out.Bytes()
}

func TestVerifyRefuses(t *testing.T) {
	f := newFixture(t)
	good := f.build(t, false)

	otherPub, _, _ := ed25519.GenerateKey(rand.Reader)

	flip := func(b []byte) []byte {
		c := append([]byte{}, b...)
		c[len(c)/2] ^= 1

		return c
	}

	for _, tc := range []struct {
		name string
		img  []byte
		keys []ed25519.PublicKey
		want string
	}{
		{"wrong key", good, []ed25519.PublicKey{otherPub}, "does not verify with any trusted key"},
		{"no keys", good, nil, "no trusted image keys"},
		{"unsigned", rewrite(t, good, func(n string, d []byte) (string, []byte, bool) { return n, d, n != SignatureName }), []ed25519.PublicKey{f.pub}, "not signed"},
		{"tampered binary", rewrite(t, good, func(n string, d []byte) (string, []byte, bool) {
			if n == MachinedName {
				return n, flip(d), true
			}

			return n, d, true
		}), []ed25519.PublicKey{f.pub}, "does not match its sha256"},
		{"tampered manifest", rewrite(t, good, func(n string, d []byte) (string, []byte, bool) {
			if n == ManifestName {
				return n, bytes.Replace(d, []byte("v1.11.1"), []byte("v1.11.9"), 1), true
			}

			return n, d, true
		}), []ed25519.PublicKey{f.pub}, "does not verify"},
		{"resized binary", rewrite(t, good, func(n string, d []byte) (string, []byte, bool) {
			if n == EtcdName {
				return n, append(d, 'x'), true
			}

			return n, d, true
		}), []ed25519.PublicKey{f.pub}, "signed manifest says"},
		{"extra file", rewrite(t, good, func(n string, d []byte) (string, []byte, bool) {
			if n == EtcdName {
				return "../../evil", d, true
			}

			return n, d, true
		}), []ed25519.PublicKey{f.pub}, "does not list"},
		{"missing file", rewrite(t, good, func(n string, d []byte) (string, []byte, bool) { return n, d, n != EtcdName }), []ed25519.PublicKey{f.pub}, "lacks \"etcd\""},
		{"truncated", good[:len(good)/2], []ed25519.PublicKey{f.pub}, "image"},
		{"not an image", []byte("hello world, definitely not a tar file at all..."), []ed25519.PublicKey{f.pub}, "image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Verify(bytes.NewReader(tc.img), tc.keys)
			if err == nil {
				t.Fatal("image accepted")
			}

			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}

			// Nothing is left behind by a refused extraction.
			path := filepath.Join(t.TempDir(), "img")
			os.WriteFile(path, tc.img, 0o644)

			dest := filepath.Join(t.TempDir(), "slot")

			if _, err = Extract(path, tc.keys, dest); err == nil {
				t.Fatal("extract accepted the image")
			}

			entries, _ := os.ReadDir(filepath.Dir(dest))
			if len(entries) != 0 {
				t.Fatalf("refused extraction left %d entries", len(entries))
			}
		})
	}
}

func TestExtractAndVerifyDir(t *testing.T) {
	f := newFixture(t)
	path := filepath.Join(f.dir, "image")

	if _, err := BuildFile(path, BuildOptions{Version: "v1.11.1", Key: f.priv, Files: f.files, Compress: true}); err != nil {
		t.Fatal(err)
	}

	slot := filepath.Join(t.TempDir(), "B")

	m, err := Extract(path, []ed25519.PublicKey{f.pub}, slot)
	if err != nil {
		t.Fatal(err)
	}

	if m.Version != "v1.11.1" {
		t.Fatalf("version %q", m.Version)
	}

	data, err := os.ReadFile(filepath.Join(slot, MachinedName))
	if err != nil || string(data) != "machined binary v2" {
		t.Fatalf("machined content %q %v", data, err)
	}

	if fi, _ := os.Stat(filepath.Join(slot, MachinedName)); fi.Mode()&0o100 == 0 {
		t.Fatal("machined is not executable")
	}

	if _, err = VerifyDir(slot, []ed25519.PublicKey{f.pub}); err != nil {
		t.Fatal(err)
	}

	// Extract never overwrites.
	if _, err = Extract(path, []ed25519.PublicKey{f.pub}, slot); err == nil {
		t.Fatal("extract over an existing slot accepted")
	}

	// Damage on disk is found.
	if err = os.WriteFile(filepath.Join(slot, EtcdName), []byte("etcd binarY"), 0o755); err != nil {
		t.Fatal(err)
	}

	if _, err = VerifyDir(slot, []ed25519.PublicKey{f.pub}); err == nil || !strings.Contains(err.Error(), "etcd does not match") {
		t.Fatalf("damaged slot: got %v", err)
	}
}

func TestBuildRefuses(t *testing.T) {
	f := newFixture(t)

	for _, tc := range []struct {
		name string
		opts BuildOptions
		want string
	}{
		{"bad version", BuildOptions{Version: "latest", Key: f.priv, Files: f.files}, "not a version"},
		{"no key", BuildOptions{Version: "v1.0.0", Files: f.files}, "no signing key"},
		{"no etcd", BuildOptions{Version: "v1.0.0", Key: f.priv, Files: map[string]string{MachinedName: f.files[MachinedName]}}, "no etcd given"},
		{"metal without initramfs", BuildOptions{Version: "v1.0.0", Key: f.priv, Files: map[string]string{VmlinuzName: f.files[MachinedName]}}, "no initramfs.img given"},
	} {
		out := filepath.Join(t.TempDir(), "img")

		_, err := BuildFile(out, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: got %v, want %q", tc.name, err, tc.want)
		}

		if _, err = os.Stat(out); err == nil {
			t.Fatalf("%s: failed build left an image", tc.name)
		}
	}
}

func TestCLI(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()

	var out bytes.Buffer

	if err := Main([]string{"keygen", "--out", dir}, &out); err != nil {
		t.Fatal(err)
	}

	if strings.Contains(out.String(), "PRIVATE") {
		t.Fatal("keygen printed the private key")
	}

	img := filepath.Join(dir, "talos.img")
	if err := Main([]string{"build", "--key", filepath.Join(dir, "image-signing.key"), "--version", "v1.2.3",
		"--machined", f.files[MachinedName], "--etcd", f.files[EtcdName], "--out", img}, &out); err != nil {
		t.Fatal(err)
	}

	out.Reset()

	if err := Main([]string{"verify", "--pub", filepath.Join(dir, "image-signing.pub"), img}, &out); err != nil {
		t.Fatal(err)
	}

	if !strings.Contains(out.String(), "version v1.2.3") {
		t.Fatalf("verify output %q", out.String())
	}

	if err := Main([]string{"verify", "--pub", filepath.Join(f.dir, "k.pub"), img}, &out); err == nil {
		t.Fatal("verify with another key passed")
	}

	// pubkey prints what TrustedKeys takes; a node built with it trusts the key.
	out.Reset()

	if err := Main([]string{"pubkey", filepath.Join(dir, "image-signing.pub")}, &out); err != nil {
		t.Fatal(err)
	}

	old := TrustedKeys
	TrustedKeys = strings.TrimSpace(out.String())

	defer func() { TrustedKeys = old }()

	keys, err := NodeKeys("")
	if err != nil || len(keys) != 1 {
		t.Fatalf("built-in keys: %v %v", keys, err)
	}

	if _, err = VerifyFile(img, keys); err != nil {
		t.Fatalf("verify with built-in key: %v", err)
	}
}

// A metal image holds a kernel and an initramfs; it streams into a slot (as a download does)
// and a manifest that lists only half of one is refused.
func TestMetalImageExtractFrom(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	files := map[string]string{}

	for name, body := range map[string]string{VmlinuzName: "kernel", InitramfsName: strings.Repeat("initramfs", 1000)} {
		files[name] = filepath.Join(dir, name)
		if err := os.WriteFile(files[name], []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	var img bytes.Buffer

	m, err := Build(&img, BuildOptions{Version: "v1.2.3", Key: f.priv, Files: files})
	if err != nil {
		t.Fatal(err)
	}

	if !m.Metal() || len(m.Files) != 2 {
		t.Fatalf("manifest: %+v", m)
	}

	slot := filepath.Join(t.TempDir(), "B")

	got, err := ExtractFrom(io.NopCloser(&img), []ed25519.PublicKey{f.pub}, slot)
	if err != nil || !got.Metal() {
		t.Fatalf("extract: %v %+v", err, got)
	}

	if b, _ := os.ReadFile(filepath.Join(slot, InitramfsName)); len(b) != 9000 {
		t.Fatalf("initramfs in the slot is %d bytes", len(b))
	}

	if _, err = VerifyDir(slot, []ed25519.PublicKey{f.pub}); err != nil {
		t.Fatal(err)
	}

	// The manifest check: a kernel without an initramfs is no metal image.
	half := &Manifest{Format: Format, Version: "v1.2.3", Files: []File{{Name: VmlinuzName, SHA256: strings.Repeat("0", 64)}}}
	if err = half.check(); err == nil || !strings.Contains(err.Error(), `no "initramfs.img"`) {
		t.Fatalf("half a metal image: %v", err)
	}
}

// TestExtractRefusesDamagedStream: a byte flipped in a compressed image is refused as the
// image's fault (ErrRefused, "altered or damaged"), whether it breaks a file's digest or the
// compressed stream itself while the file is written out. (A flip in bytes nothing signs, a
// tar header's mtime say, may pass: every file still matches its signed digest.)
func TestExtractRefusesDamagedStream(t *testing.T) {
	f := newFixture(t)
	good := f.build(t, true)

	refusedCount := 0

	for i := range 64 {
		at := len(good)/4 + i*(len(good)/2)/64
		img := append([]byte{}, good...)
		img[at] ^= 0xff

		_, err := ExtractFrom(bytes.NewReader(img), []ed25519.PublicKey{f.pub}, filepath.Join(t.TempDir(), "x"))
		if err != nil && !errors.Is(err, ErrRefused) {
			t.Fatalf("byte %d flipped: got %v, want a refusal (ErrRefused)", at, err)
		}

		if err != nil {
			refusedCount++
		}
	}

	if refusedCount < 32 {
		t.Fatalf("only %d of 64 flipped bytes were refused", refusedCount)
	}
}
