package imager

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Main is the imager command: keygen, build, verify.
func Main(args []string, stdout io.Writer) error {
	usage := errors.New("usage: imager keygen --out DIR | pubkey FILE.pub | build --key FILE --version vX.Y.Z --machined FILE --etcd FILE --out FILE | verify --pub FILE IMAGE")

	if len(args) == 0 {
		return usage
	}

	switch args[0] {
	case "keygen":
		fs := flag.NewFlagSet("keygen", flag.ContinueOnError)
		out := fs.String("out", ".", "folder for image-signing.key (private, 0600) and image-signing.pub")

		if err := fs.Parse(args[1:]); err != nil {
			return err
		}

		priv, pub := filepath.Join(*out, "image-signing.key"), filepath.Join(*out, "image-signing.pub")

		k, err := GenerateKey(priv, pub)
		if err != nil {
			return err
		}

		fmt.Fprintf(stdout, "key %s: private %s (keep it secret), public %s (give it to nodes)\n", KeyID(k), priv, pub)

		return nil
	case "build":
		fs := flag.NewFlagSet("build", flag.ContinueOnError)
		key := fs.String("key", "", "private signing key (imager keygen)")
		version := fs.String("version", "", "image version, e.g. v1.11.1 (must match the Tag built into machined)")
		machined := fs.String("machined", "", "multi-call binary")
		etcd := fs.String("etcd", "", "etcd binary")
		out := fs.String("out", "", "image file to write")
		compress := fs.Bool("gzip", true, "compress the image")

		if err := fs.Parse(args[1:]); err != nil {
			return err
		}

		if *key == "" || *version == "" || *machined == "" || *etcd == "" || *out == "" {
			return errors.New("build needs --key, --version, --machined, --etcd and --out")
		}

		priv, err := LoadPrivateKey(*key)
		if err != nil {
			return err
		}

		m, err := BuildFile(*out, BuildOptions{
			Version: *version, Key: priv, Compress: *compress,
			Files: map[string]string{MachinedName: *machined, EtcdName: *etcd},
		})
		if err != nil {
			return err
		}

		fmt.Fprintf(stdout, "image %s: version %s, %d files, signed by key %s\n", *out, m.Version, len(m.Files), KeyID(priv.Public().(ed25519.PublicKey))) //nolint:forcetypeassert // an ed25519 key's public half

		return nil
	case "pubkey":
		// Prints the public keys of a PEM file as the comma-separated base64 that TrustedKeys
		// takes, for -ldflags "-X github.com/talos-go/talos/internal/imager.TrustedKeys=...".
		if len(args) != 2 {
			return errors.New("usage: imager pubkey FILE.pub")
		}

		keys, err := LoadPublicKeys(args[1])
		if err != nil {
			return err
		}

		enc := make([]string, 0, len(keys))
		for _, k := range keys {
			enc = append(enc, base64.StdEncoding.EncodeToString(k))
		}

		fmt.Fprintln(stdout, strings.Join(enc, ","))

		return nil
	case "verify":
		fs := flag.NewFlagSet("verify", flag.ContinueOnError)
		pub := fs.String("pub", "", "trusted public key(s), PEM")

		if err := fs.Parse(args[1:]); err != nil {
			return err
		}

		if *pub == "" || fs.NArg() != 1 {
			return errors.New("verify needs --pub FILE and one image")
		}

		keys, err := LoadPublicKeys(*pub)
		if err != nil {
			return err
		}

		m, err := VerifyFile(fs.Arg(0), keys)
		if err != nil {
			return err
		}

		fmt.Fprintf(stdout, "image %s: OK, version %s\n", fs.Arg(0), m.Version)

		for _, f := range m.Files {
			fmt.Fprintf(stdout, "  %s %d bytes sha256:%s\n", f.Name, f.Size, f.SHA256)
		}

		return nil
	}

	return usage
}

// CommandMain is Main for a program's main: errors go to stderr with a non-zero exit.
func CommandMain() {
	if err := Main(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "imager: %v\n", err)
		os.Exit(1)
	}
}
