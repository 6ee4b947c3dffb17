package imager

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/talos-go/talos/internal/registry"
	"github.com/talos-go/talos/internal/schematic"
)

// An installer image is a node image carried as an OCI image, so that nodes upgrade from a
// registry: linux/<arch> (the signed image's arch), one layer holding the signed image at
// InstallerPath, and config labels naming the format and the version. The OCI digests only
// say the bytes are those pushed; the signature inside is what a node trusts.
const (
	InstallerLabel        = "dev.talos-go.installer" // its value is InstallerFormat
	InstallerFormat       = "1"
	InstallerVersionLabel = "dev.talos-go.version"
	InstallerPath         = "usr/install/talos.img" // in the layer (no leading slash, as tar names)
	// InstallerSchematicLabel names the ID of the schematic the image carries (none: absent).
	InstallerSchematicLabel = "dev.talos-go.schematic"
)

// InstallerImage wraps the signed image at imagePath, checked against keys, as an installer image.
// The layer is streamed from the file each time it is read, never held in memory.
func InstallerImage(imagePath string, keys []ed25519.PublicKey) (v1.Image, *Manifest, error) {
	man, err := VerifyFile(imagePath, keys)
	if err != nil {
		return nil, nil, fmt.Errorf("installer image from %s: %w", imagePath, err)
	}

	fi, err := os.Stat(imagePath)
	if err != nil {
		return nil, nil, err
	}

	// A gzip image gains nothing from a second compression: store it in gzip's framing only.
	level := gzip.BestSpeed
	if gzipped(imagePath) {
		level = gzip.NoCompression
	}

	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		f, err := os.Open(imagePath)
		if err != nil {
			return nil, err
		}

		pr, pw := io.Pipe()

		go func() {
			defer f.Close()

			pw.CloseWithError(writeInstallerLayer(pw, f, fi.Size()))
		}()

		return pr, nil
	}, tarball.WithCompressionLevel(level))
	if err != nil {
		return nil, nil, err
	}

	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, nil, err
	}

	cf, err := img.ConfigFile()
	if err != nil {
		return nil, nil, err
	}

	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", man.Arch
	cf.Config.Labels = map[string]string{InstallerLabel: InstallerFormat, InstallerVersionLabel: man.Version}
	if man.Schematic != "" {
		cf.Config.Labels[InstallerSchematicLabel] = man.Schematic
	}

	img, err = mutate.ConfigFile(img, cf)

	return img, man, err
}

func gzipped(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()

	magic := make([]byte, 2)
	_, err = io.ReadFull(f, magic)

	return err == nil && magic[0] == 0x1f && magic[1] == 0x8b
}

func writeInstallerLayer(w io.Writer, image io.Reader, size int64) error {
	tw := tar.NewWriter(w)
	epoch := time.Unix(0, 0)

	for _, dir := range []string{"usr/", "usr/install/"} {
		if err := tw.WriteHeader(&tar.Header{Name: dir, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch}); err != nil {
			return err
		}
	}

	if err := tw.WriteHeader(&tar.Header{Name: InstallerPath, Typeflag: tar.TypeReg, Mode: 0o644, Size: size, ModTime: epoch}); err != nil {
		return err
	}

	if _, err := io.Copy(tw, image); err != nil {
		return err
	}

	return tw.Close()
}

// ErrNotInstaller marks an image that is not an installer image (or not for this machine).
var ErrNotInstaller = fmt.Errorf("%w: not an installer image", ErrRefused)

// CheckInstallerConfig refuses an image config that is not an installer image for linux/arch.
// It returns the version the image's label names.
func CheckInstallerConfig(cf *v1.ConfigFile, arch string) (string, error) {
	if cf.Config.Labels[InstallerLabel] == "" {
		return "", fmt.Errorf("%w: its config has no %s label: build it with `imager installer`", ErrNotInstaller, InstallerLabel)
	}

	if f := cf.Config.Labels[InstallerLabel]; f != InstallerFormat {
		return "", fmt.Errorf("%w: installer format %q, this node reads %q: build it with this release's `imager installer`", ErrRefused, f, InstallerFormat)
	}

	if cf.OS != "linux" || cf.Architecture != arch {
		return "", fmt.Errorf("%w: the installer image is for %s/%s and this node is linux/%s: build it from a %s image", ErrRefused, cf.OS, cf.Architecture, arch, arch)
	}

	return cf.Config.Labels[InstallerVersionLabel], nil
}

// InstallerPayload reads an installer layer's tar (uncompressed) up to the signed image and
// returns a reader of it.
func InstallerPayload(layer io.Reader) (io.Reader, error) {
	tr := tar.NewReader(layer)

	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: its layer has no /%s", ErrNotInstaller, InstallerPath)
		}

		if err != nil {
			return nil, fmt.Errorf("%w: reading its layer: %w", ErrRefused, err)
		}

		if path.Clean(hdr.Name) == InstallerPath && hdr.Typeflag == tar.TypeReg {
			return tr, nil
		}
	}
}

// installerMain is `imager installer`: wrap a signed image as an installer image and push it,
// or write it as an archive (docker save format).
func installerMain(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("installer", flag.ContinueOnError)
	image := fs.String("image", "", "signed node image (make image / make metal-image)")
	pub := fs.String("pub", "", "public key(s) the image must be signed by, PEM (e.g. _out/image-signing.pub)")
	push := fs.String("push", "", "reference to push to, HOST[:PORT]/REPOSITORY:TAG; without a tag, HOST[:PORT]/PREFIX/installer/<schematic ID>:<version> as the Image Factory names installers")
	out := fs.String("out", "", "archive to write instead of pushing (docker save format)")
	ca := fs.String("ca", "", "CA certificate (PEM) of the registry, if not one the system trusts")
	user := fs.String("username", "", "registry user name")
	passFile := fs.String("password-file", "", "file holding the registry password")

	if err := fs.Parse(args); err != nil {
		return err
	}

	if *image == "" || *pub == "" || (*push == "") == (*out == "") {
		return errors.New("usage: imager installer --image FILE --pub FILE.pub (--push HOST/REPO[:TAG] [--ca FILE] [--username U --password-file F] | --out FILE.tar)")
	}

	keys, err := LoadPublicKeys(*pub)
	if err != nil {
		return err
	}

	img, man, err := InstallerImage(*image, keys)
	if err != nil {
		return err
	}

	if *out != "" {
		ref := "talos-go/installer:" + man.Version
		if man.Schematic != "" {
			ref = InstallerReference("talos-go", man)
		}

		if err = writeInstallerArchive(*out, ref, img); err != nil {
			return err
		}

		fmt.Fprintf(stdout, "installer image %s (%s): version %s, linux/%s\n", *out, ref, man.Version, man.Arch)

		return nil
	}

	*push = pushReference(*push, man)
	client := registry.Client{Username: *user}

	if *ca != "" {
		if client.CA, err = os.ReadFile(*ca); err != nil {
			return err
		}
	}

	if *passFile != "" {
		pass, err := os.ReadFile(*passFile)
		if err != nil {
			return err
		}

		client.Password = string(trimNewline(pass))
	}

	if err = client.Push(ctx, *push, img); err != nil {
		var terr *transport.Error
		if errors.As(err, &terr) && (terr.StatusCode == http.StatusUnauthorized || terr.StatusCode == http.StatusForbidden) {
			return fmt.Errorf("the registry refused the credentials of user %q (--username, --password-file): %w", *user, err)
		}

		return err
	}

	digest, err := img.Digest()
	if err != nil {
		return err
	}

	// The digest reference is what `talosctl upgrade --image` pins.
	tag, err := name.NewTag(*push)
	if err != nil {
		return err
	}

	fmt.Fprintf(stdout, "installer image %s: version %s, linux/%s\npinned: %s@%s\n", *push, man.Version, man.Arch, tag.Context().Name(), digest)

	return nil
}

// InstallerReference is where the Image Factory would serve the installer of man's version
// and schematic under prefix (HOST[:PORT]/PATH): prefix/installer/<schematic ID>:<version>,
// the vanilla schematic's ID for an image without one.
func InstallerReference(prefix string, man *Manifest) string {
	id := man.Schematic
	if id == "" {
		id = schematic.VanillaID
	}

	return strings.TrimSuffix(prefix, "/") + "/installer/" + id + ":" + man.Version
}

// pushReference is the reference --push names: as given with a tag, else the factory's name
// under it (InstallerReference).
func pushReference(push string, man *Manifest) string {
	if last := push[strings.LastIndex(push, "/")+1:]; strings.ContainsAny(last, ":@") {
		return push
	}

	return InstallerReference(push, man)
}

func writeInstallerArchive(out, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}

	f, err := os.Create(out)
	if err != nil {
		return err
	}

	bw := bufio.NewWriter(f)

	if err = tarball.Write(tag, img, bw); err == nil {
		err = bw.Flush()
	}

	if cerr := f.Close(); err == nil {
		err = cerr
	}

	return err
}

func trimNewline(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}

	return b
}
