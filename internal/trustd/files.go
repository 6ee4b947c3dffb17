// Package trustd is the node's certificate authority endpoint: joining nodes send a CSR and the
// cluster token to SecurityService/Certificate on port 50001 and get back a certificate signed by
// the OS CA. trustd runs as its own process with only the CA, the token and its own serving
// certificate, which machined writes into its folder.
package trustd

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"

	"github.com/talos-go/talos/internal/filestore"
	"github.com/talos-go/talos/internal/pki"
)

// Files in trustd's folder (<state>/system/secrets/trustd). All are written 0600.
const (
	CACrt     = "ca.crt"     // issuing CA first, then accepted CAs
	CAKey     = "ca.key"     // issuing CA key
	TokenFile = "token"      // the cluster token (machine.token); empty: token joins are off
	ServerCrt = "server.crt" // trustd's serving certificate
	ServerKey = "server.key"
)

// Files lists every file of the folder, in the order a writer should replace them (the token and
// the CA first, so a new serving certificate is never served with an old CA).
var Files = []string{TokenFile, CAKey, CACrt, ServerKey, ServerCrt}

// Bundle is one consistent load of trustd's folder.
type Bundle struct {
	CA       *pki.CA // issuing CA and its key
	CABundle []byte  // PEM: issuing CA, then accepted CAs (returned to callers)
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

	keyPEM, err := read(CAKey)
	if err != nil {
		return nil, err
	}

	// The bundle's first certificate is the issuing CA.
	ca, err := pki.ParseCA(caPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("parsing %s and %s: %w", CACrt, CAKey, err)
	}

	token, err := read(TokenFile)
	if err != nil {
		return nil, err
	}

	// An empty token (no machine.token on this control plane) turns token joins off: only
	// joins by approval are signed.
	token = bytes.TrimSpace(token)

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

	return &Bundle{CA: ca, CABundle: caPEM, Token: token, Server: server}, nil
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

// WriteFiles writes trustd's folder (0700), each file 0600 and replaced atomically, in the
// order of Files.
func WriteFiles(dir string, files map[string][]byte) error {
	return pki.WriteFiles(dir, Files, files)
}
