// Package trustd is the node's certificate authority endpoint: joining nodes send a CSR and the
// cluster token to SecurityService/Certificate on port 50001 and get back a certificate signed by
// the OS CA. trustd runs as its own process with only the CA, the token and its own serving
// certificate, which machined writes into its folder.
package trustd

import (
	"bytes"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"github.com/talos-go/talos/internal/filestore"
	"os"
	"path/filepath"
	"strings"
)

// Files in trustd's folder (<state>/system/secrets/trustd). All are written 0600.
const (
	CACrt     = "ca.crt"     // issuing CA first, then accepted CAs
	CAKey     = "ca.key"     // issuing CA key
	TokenFile = "token"      // the cluster token (machine.token)
	ServerCrt = "server.crt" // trustd's serving certificate
	ServerKey = "server.key"
)

// Files lists every file of the folder, in the order a writer should replace them (the token and
// the CA first, so a new serving certificate is never served with an old CA).
var Files = []string{TokenFile, CAKey, CACrt, ServerKey, ServerCrt}

// Bundle is one consistent load of trustd's folder.
type Bundle struct {
	CA       *x509.Certificate // issuing CA
	CAKey    crypto.Signer
	CABundle []byte // PEM: issuing CA, then accepted CAs (returned to callers)
	Token    []byte
	Server   tls.Certificate
}

// LoadBundle reads and checks trustd's folder.
func LoadBundle(dir string) (*Bundle, error) {
	read := func(name string) ([]byte, error) {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", name, err)
		}

		return data, nil
	}

	caPEM, err := read(CACrt)
	if err != nil {
		return nil, err
	}

	block, _ := pem.Decode(caPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("parsing %s: no certificate", CACrt)
	}

	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", CACrt, err)
	}

	keyPEM, err := read(CAKey)
	if err != nil {
		return nil, err
	}

	key, err := ParsePrivateKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", CAKey, err)
	}

	token, err := read(TokenFile)
	if err != nil {
		return nil, err
	}

	token = bytes.TrimSpace(token)
	if len(token) == 0 {
		return nil, fmt.Errorf("%s is empty", TokenFile)
	}

	crt, err := read(ServerCrt)
	if err != nil {
		return nil, err
	}

	srvKey, err := read(ServerKey)
	if err != nil {
		return nil, err
	}

	server, err := tls.X509KeyPair(crt, srvKey)
	if err != nil {
		return nil, fmt.Errorf("parsing %s and its key: %w", ServerCrt, err)
	}

	return &Bundle{CA: ca, CAKey: key, CABundle: caPEM, Token: token, Server: server}, nil
}

// ParsePrivateKey parses a PEM private key (PKCS#8, EC, RSA or Talos's "ED25519 PRIVATE KEY").
func ParsePrivateKey(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block")
	}

	if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		if s, ok := k.(crypto.Signer); ok {
			return s, nil
		}

		return nil, errors.New("key cannot sign")
	}

	if k, err := x509.ParseECPrivateKey(block.Bytes); err == nil {
		return k, nil
	}

	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}

	return nil, fmt.Errorf("unsupported private key (%s)", strings.ToLower(block.Type))
}

// Store holds the current bundle and reloads it when the files change.
type Store struct {
	*filestore.Store[*Bundle]
}

// NewStore loads dir; it fails when the folder is incomplete or invalid.
func NewStore(dir string) (*Store, error) {
	fs, err := filestore.New(dir, Files, LoadBundle)
	if err != nil {
		return nil, err
	}

	return &Store{fs}, nil
}

// ServerTLS serves the current certificate (server-authenticated TLS: joining nodes have no
// client certificate yet).
func (s *Store) ServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{"h2"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			b := s.Current()

			return &b.Server, nil
		},
	}
}

// WriteFiles writes trustd's folder, each file 0600 and replaced atomically (write, then
// rename), in the order of Files.
func WriteFiles(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}

	for _, name := range Files {
		data, ok := files[name]
		if !ok {
			return fmt.Errorf("missing %s", name)
		}

		if cur, err := os.ReadFile(filepath.Join(dir, name)); err == nil && bytes.Equal(cur, data) {
			continue
		}

		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			return fmt.Errorf("writing %s: %w", name, err)
		}

		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("replacing %s: %w", name, err)
		}
	}

	return nil
}
