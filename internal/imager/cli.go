package imager

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/talos-go/talos/internal/version"
)

// Options are one imager command and its settings.
type Options struct {
	Command string // keygen, build, pubkey or verify

	Out      string // keygen: folder for the key pair; build: the image file
	Key      string // build: the private signing key
	Version  string // build: the image version
	Machined string // build: the multi-call binary
	Etcd     string // build: the etcd binary
	Rootfs   string // build: the node rootfs squashfs to carry, optional
	Vmlinuz  string // build (metal): the kernel
	Initrd   string // build (metal): the initramfs
	PCRKey   string // build (metal): the PCR signing key, for nodes booting signed UKIs (optional)
	Gzip     bool   // build: compress the image
	// Schematic is the Image Factory schematic the image carries (build, optional): its extra
	// kernel arguments and META values are applied when a node installs the image.
	Schematic string
	Pub       string // verify: trusted public key(s); pubkey: the PEM file to print
	Image     string // verify: the image file
}

var errUsage = errors.New("usage: imager keygen --out DIR | pcr-keygen --out FILE.pem | pubkey FILE.pub | build --key FILE --version vX.Y.Z (--machined FILE --etcd FILE [--rootfs FILE] | --vmlinuz FILE --initramfs FILE) [--schematic FILE.yaml] --out FILE | verify --pub FILE IMAGE | rootfs [--version vX.Y.Z] [--kubernetes=false] --machined FILE --etcd FILE [--apid FILE --trustd FILE] --out FILE.sqsh | boot --kernel DIR --machined FILE --rootfs FILE.sqsh --out DIR | installer --image FILE --pub FILE.pub (--push HOST/REPO[:TAG] | --out FILE.tar)")

// Main is the imager command: keygen, pubkey, build, verify, rootfs, boot, installer.
func Main(args []string, stdout io.Writer) error {
	if len(args) > 0 && args[0] == "rootfs" {
		return rootfsMain(args[1:], stdout)
	}

	if len(args) > 0 && args[0] == "boot" {
		return bootMain(args[1:], stdout)
	}

	if len(args) > 0 && args[0] == "installer" {
		return installerMain(context.Background(), args[1:], stdout)
	}

	opts, err := parseArgs(args)
	if err != nil {
		return err
	}

	return run(context.Background(), stdout, opts)
}

// parseArgs reads a command line into Options, refusing one that lacks what its command needs.
func parseArgs(args []string) (Options, error) {
	if len(args) == 0 {
		return Options{}, errUsage
	}

	opts := Options{Command: args[0]}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)

	switch opts.Command {
	case "keygen":
		fs.StringVar(&opts.Out, "out", ".", "folder for image-signing.key (private, 0600) and image-signing.pub")
	case "build":
		fs.StringVar(&opts.Key, "key", "", "private signing key (imager keygen)")
		fs.StringVar(&opts.Version, "version", "", "image version, e.g. v1.11.1 (must match the Tag built into machined)")
		fs.StringVar(&opts.Machined, "machined", "", "multi-call binary")
		fs.StringVar(&opts.Etcd, "etcd", "", "etcd binary")
		fs.StringVar(&opts.Rootfs, "rootfs", "", "node rootfs squashfs (imager rootfs) to carry as "+RootfsName)
		fs.StringVar(&opts.Vmlinuz, "vmlinuz", "", "metal image: the kernel (make boot's _out/boot/vmlinuz)")
		fs.StringVar(&opts.Initrd, "initramfs", "", "metal image: the initramfs (make boot's _out/boot/initramfs.img)")
		fs.StringVar(&opts.PCRKey, "pcr-key", "", "metal image: the PCR signing key of the boot assets' UKI, so that nodes booting it can upgrade (make boot's _out/pcr-signing-key.pem)")
		fs.StringVar(&opts.Out, "out", "", "image file to write")
		fs.BoolVar(&opts.Gzip, "gzip", true, "compress the image")
		fs.StringVar(&opts.Schematic, "schematic", "", "Image Factory schematic (YAML) the image carries: extraKernelArgs (metal) and META values, applied when a node installs it; the image is named by its ID")
	case "pcr-keygen":
		fs.StringVar(&opts.Out, "out", "", "file for the PCR signing key (RSA 2048, PEM, 0600), e.g. _out/pcr-signing-key.pem")
	case "pubkey":
		// Prints the public keys of a PEM file as the comma-separated base64 that TrustedKeys
		// takes, for -ldflags "-X github.com/talos-go/talos/internal/imager.TrustedKeys=...".
		if len(args) != 2 {
			return opts, errors.New("usage: imager pubkey FILE.pub")
		}

		opts.Pub = args[1]

		return opts, nil
	case "verify":
		fs.StringVar(&opts.Pub, "pub", "", "trusted public key(s), PEM")
	default:
		return opts, errUsage
	}

	if err := fs.Parse(args[1:]); err != nil {
		return opts, err
	}

	switch opts.Command {
	case "build":
		metal := opts.Vmlinuz != "" || opts.Initrd != ""
		if metal && (opts.Machined != "" || opts.Etcd != "" || opts.Rootfs != "") {
			return opts, errors.New("build: a metal image (--vmlinuz, --initramfs) holds no --machined, --etcd or --rootfs: the initramfs carries the node image")
		}

		if opts.Key == "" || opts.Version == "" || opts.Out == "" ||
			(metal && (opts.Vmlinuz == "" || opts.Initrd == "")) || (!metal && (opts.Machined == "" || opts.Etcd == "")) {
			return opts, errors.New("build needs --key, --version, --out and either --machined and --etcd, or --vmlinuz and --initramfs (metal)")
		}
	case "pcr-keygen":
		if opts.Out == "" {
			return opts, errors.New("pcr-keygen needs --out FILE.pem")
		}
	case "verify":
		if opts.Pub == "" || fs.NArg() != 1 {
			return opts, errors.New("verify needs --pub FILE and one image")
		}

		opts.Image = fs.Arg(0)
	}

	return opts, nil
}

// run carries out one command, reporting to stdout.
func run(_ context.Context, stdout io.Writer, opts Options) error {
	switch opts.Command {
	case "keygen":
		return cmdKeygen(stdout, opts)
	case "pcr-keygen":
		if err := GeneratePCRKey(opts.Out); err != nil {
			return err
		}

		fmt.Fprintf(stdout, "PCR signing key %s (keep it secret: it approves what may unseal TPM disk keys)\n", opts.Out)

		return nil
	case "build":
		return cmdBuild(stdout, opts)
	case "pubkey":
		return cmdPubkey(stdout, opts)
	case "verify":
		return cmdVerify(stdout, opts)
	}

	return errUsage
}

func cmdKeygen(stdout io.Writer, opts Options) error {
	priv, pub := filepath.Join(opts.Out, "image-signing.key"), filepath.Join(opts.Out, "image-signing.pub")

	k, err := GenerateKey(priv, pub)
	if err != nil {
		return err
	}

	fmt.Fprintf(stdout, "key %s: private %s (keep it secret), public %s (give it to nodes)\n", KeyID(k), priv, pub)

	return nil
}

func cmdBuild(stdout io.Writer, opts Options) error {
	priv, err := LoadPrivateKey(opts.Key)
	if err != nil {
		return err
	}

	files := map[string]string{MachinedName: opts.Machined, EtcdName: opts.Etcd}
	if opts.Vmlinuz != "" {
		files = map[string]string{VmlinuzName: opts.Vmlinuz, InitramfsName: opts.Initrd}
	}

	if opts.PCRKey != "" {
		if opts.Vmlinuz == "" {
			return errors.New("build: --pcr-key is for metal images (--vmlinuz, --initramfs)")
		}

		dir, err := os.MkdirTemp("", "imager-pcr-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)

		if err = writePCRSignature(opts.PCRKey, opts.Vmlinuz, opts.Initrd, dir); err != nil {
			return err
		}

		files[PCRPublicKeyName], files[PCRSignatureName] = filepath.Join(dir, PCRPublicKeyName), filepath.Join(dir, PCRSignatureName)
	}

	if opts.Rootfs != "" {
		files[RootfsName] = opts.Rootfs
	}

	if opts.Schematic != "" {
		s, err := LoadSchematic(opts.Schematic)
		if err != nil {
			return err
		}

		dir, err := os.MkdirTemp("", "imager-schematic-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)

		// The schematic as marshalled: its sha256 is the ID the manifest names.
		if files[SchematicName], _, err = writeSchematic(s, dir); err != nil {
			return err
		}
	}

	m, err := BuildFile(opts.Out, BuildOptions{Version: opts.Version, Key: priv, Compress: opts.Gzip, Files: files})
	if err != nil {
		return err
	}

	fmt.Fprintf(stdout, "image %s: version %s, %d files, signed by key %s\n", opts.Out, m.Version, len(m.Files), KeyID(priv.Public().(ed25519.PublicKey))) //nolint:forcetypeassert // an ed25519 key's public half

	if m.Schematic != "" {
		fmt.Fprintf(stdout, "schematic %s\n", m.Schematic)
	}

	return nil
}

func cmdPubkey(stdout io.Writer, opts Options) error {
	keys, err := LoadPublicKeys(opts.Pub)
	if err != nil {
		return err
	}

	enc := make([]string, 0, len(keys))
	for _, k := range keys {
		enc = append(enc, base64.StdEncoding.EncodeToString(k))
	}

	fmt.Fprintln(stdout, strings.Join(enc, ","))

	return nil
}

func cmdVerify(stdout io.Writer, opts Options) error {
	keys, err := LoadPublicKeys(opts.Pub)
	if err != nil {
		return err
	}

	m, err := VerifyFile(opts.Image, keys)
	if err != nil {
		return err
	}

	fmt.Fprintf(stdout, "image %s: OK, version %s\n", opts.Image, m.Version)

	if m.Schematic != "" {
		fmt.Fprintf(stdout, "  schematic %s\n", m.Schematic)
	}

	for _, f := range m.Files {
		fmt.Fprintf(stdout, "  %s %d bytes sha256:%s\n", f.Name, f.Size, f.SHA256)
	}

	return nil
}

// CommandMain is Main for a program's main: errors go to stderr with a non-zero exit.
func CommandMain() {
	if err := Main(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "imager: %v\n", err)
		os.Exit(1)
	}
}

func rootfsMain(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("rootfs", flag.ContinueOnError)
	opts := RootfsOptions{Progress: stdout}

	fs.StringVar(&opts.Out, "out", "", "squashfs to write, e.g. _out/rootfs.sqsh")
	fs.StringVar(&opts.CacheDir, "cache", "", "cache folder for tool builds (default: cache/ next to --out)")
	fs.StringVar(&opts.Machined, "machined", "", "multi-call binary (static), installed as /sbin/init")
	fs.StringVar(&opts.Etcd, "etcd", "", "etcd binary (static)")
	fs.StringVar(&opts.Apid, "apid", "", "apid built alone (static, optional: else apid runs from the multi-call binary)")
	fs.StringVar(&opts.Trustd, "trustd", "", "trustd built alone (static, optional: else trustd runs from the multi-call binary)")
	fs.StringVar(&opts.Version, "version", version.Tag, "node version for /etc/os-release")
	fs.StringVar(&opts.Squashfs.Compression, "comp", "zstd", "squashfs compression: zstd, xz or gzip")
	images := fs.String("images", "", "folder of OCI archives (*.tar) for the image cache")
	fs.BoolVar(&opts.Kubernetes, "kubernetes", true, "build the Kubernetes images into the image cache (false: a quicker image without them)")
	fs.StringVar(&opts.Repo, "repo", ".", "repository root, where build/kubernetes and cmd/ are (for --kubernetes)")

	if err := fs.Parse(args); err != nil {
		return err
	}

	if *images != "" {
		found, err := filepath.Glob(filepath.Join(*images, "*.tar"))
		if err != nil {
			return err
		}

		opts.Images = found
	}

	start := time.Now()

	res, err := BuildRootfs(context.Background(), opts)
	if err != nil {
		return err
	}

	how := fmt.Sprintf("%d programs checked in a chroot", res.Programs)
	if res.Cached {
		how = "cached"
	}

	fmt.Fprintf(stdout, "rootfs %s: %.1f MB (%.1f MB of files), sha256 %s, %s, %s\n", opts.Out,
		float64(res.Size)/1e6, float64(res.Content)/1e6, res.SHA256, how, time.Since(start).Round(100*time.Millisecond))

	return nil
}
