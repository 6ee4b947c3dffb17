package imager

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// TrustedKeys are image-signing public keys built into the binary, base64 of the raw 32-byte
// keys separated by commas, set with
// -ldflags "-X github.com/talos-go/talos/internal/imager.TrustedKeys=...".
var TrustedKeys = ""

// KeyID is a short name of a public key, safe to log: the first 8 bytes of its sha256, in hex.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)

	return hex.EncodeToString(sum[:8])
}

// GenerateKey writes a new key pair: the private key (PKCS#8 PEM, mode 0600) and the public key
// (PKIX PEM). It refuses to overwrite an existing key.
func GenerateKey(privPath, pubPath string) (ed25519.PublicKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}

	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, err
	}

	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}

	for _, p := range []string{privPath, pubPath} {
		if _, err = os.Lstat(p); err == nil {
			return nil, fmt.Errorf("%s already exists: keys are never overwritten; remove it or choose another --out", p)
		}
	}

	if err = writeNew(privPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}), 0o600); err != nil {
		return nil, err
	}

	if err = writeNew(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		os.Remove(privPath)

		return nil, err
	}

	return pub, nil
}

func writeNew(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}

	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return fmt.Errorf("writing key %s: %w", path, err)
	}

	if _, err = f.Write(data); err != nil {
		f.Close()
		os.Remove(path)

		return fmt.Errorf("writing key %s: %w", path, err)
	}

	if err = f.Sync(); err != nil {
		f.Close()
		os.Remove(path)

		return fmt.Errorf("writing key %s: %w", path, err)
	}

	return f.Close()
}

// LoadPrivateKey reads a private key written by GenerateKey. The key's bytes never appear in
// errors.
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("reading signing key: %w", err)
	}

	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("signing key %s is readable by others (mode %v): chmod 600 %s", path, fi.Mode().Perm(), path)
	}

	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading signing key: %w", err)
	}

	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%s is not a PEM private key: generate one with `imager keygen`", path)
	}

	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s is not a valid PKCS#8 private key", path)
	}

	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s is not an ed25519 key: generate one with `imager keygen`", path)
	}

	return priv, nil
}

// ParsePublicKeys reads one or more PEM public keys.
func ParsePublicKeys(data []byte) ([]ed25519.PublicKey, error) {
	var keys []ed25519.PublicKey

	for {
		var block *pem.Block

		block, data = pem.Decode(data)
		if block == nil {
			break
		}

		if block.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("PEM block %q is not a public key (a private key must never be given to a node)", block.Type)
		}

		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parsing public key: %w", err)
		}

		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, errors.New("public key is not ed25519")
		}

		keys = append(keys, pub)
	}

	if len(keys) == 0 && len(strings.TrimSpace(string(data))) > 0 {
		return nil, errors.New("no PEM public key found")
	}

	return keys, nil
}

// LoadPublicKeys reads the PEM public keys in path.
func LoadPublicKeys(path string) ([]ed25519.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}

	keys, err := ParsePublicKeys(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}

	return keys, nil
}

// NodeKeys returns the keys a node trusts: the ones built in (TrustedKeys) and those in the
// PEM file trustedFile if it exists.
func NodeKeys(trustedFile string) ([]ed25519.PublicKey, error) {
	var keys []ed25519.PublicKey

	for _, s := range strings.Split(TrustedKeys, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}

		raw, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(raw) != ed25519.PublicKeySize {
			return nil, errors.New("built-in TrustedKeys holds an invalid key: rebuild with base64 ed25519 public keys")
		}

		keys = append(keys, ed25519.PublicKey(raw))
	}

	if trustedFile != "" {
		fileKeys, err := LoadPublicKeys(trustedFile)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("trusted image keys: %w", err)
		}

		keys = append(keys, fileKeys...)
	}

	return keys, nil
}
