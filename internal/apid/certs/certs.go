// Package certs is apid's certificate folder: the file names, the writer machined uses, and a
// store that loads them and picks up rotated files without a restart.
package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/talos-go/talos/internal/filestore"
	"github.com/talos-go/talos/internal/pki"
)

// Files in apid's certificate folder. Keys are written 0600.
const (
	CA        = "ca.crt"     // OS CA bundle: verifies clients and other nodes' apid
	ServerCrt = "server.crt" // apid's serving certificate (node addresses, hostname, certSANs)
	ServerKey = "server.key"
	ClientCrt = "client.crt" // the node's client certificate (os:impersonator), for node-to-node calls
	ClientKey = "client.key"
)

// All lists every file of the folder, in the order WriteFiles replaces them: keys and
// certificates first, the CA bundle last.
var All = []string{ServerKey, ServerCrt, ClientKey, ClientCrt, CA}

// WriteFiles writes apid's folder (0700), each file 0600 and replaced atomically, so apid never
// reads a half-written file.
func WriteFiles(dir string, files map[string][]byte) error {
	return pki.WriteFiles(dir, All, files)
}

// Bundle is one consistent load of the folder.
type Bundle struct {
	Server tls.Certificate
	Client tls.Certificate
	CAs    *x509.CertPool
	Loaded time.Time
}

// Load reads and parses the folder.
func Load(dir string) (*Bundle, error) {
	read := func(name string) ([]byte, error) {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", name, err)
		}

		return data, nil
	}

	caPEM, err := read(CA)
	if err != nil {
		return nil, err
	}

	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("parsing %s: no certificate found", CA)
	}

	pair := func(crt, key string) (tls.Certificate, error) {
		c, err := read(crt)
		if err != nil {
			return tls.Certificate{}, err
		}

		k, err := read(key)
		if err != nil {
			return tls.Certificate{}, err
		}

		cert, err := tls.X509KeyPair(c, k)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("parsing %s and its key: %w", crt, err)
		}

		return cert, nil
	}

	server, err := pair(ServerCrt, ServerKey)
	if err != nil {
		return nil, err
	}

	client, err := pair(ClientCrt, ClientKey)
	if err != nil {
		return nil, err
	}

	return &Bundle{Server: server, Client: client, CAs: pool, Loaded: time.Now()}, nil
}

// Store holds the current bundle and reloads it when the files change.
type Store struct {
	*filestore.Store[*Bundle]
}

// NewStore loads dir; it fails when the folder is not complete and valid.
func NewStore(dir string) (*Store, error) {
	fs, err := filestore.New(dir, All, Load)
	if err != nil {
		return nil, err
	}

	return &Store{fs}, nil
}

// ServerTLS is apid's listener config: TLS 1.3, client certificate required and verified
// against the current CA bundle, current server certificate.
func (s *Store) ServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			b := s.Current()

			return &tls.Config{
				MinVersion:   tls.VersionTLS13,
				Certificates: []tls.Certificate{b.Server},
				ClientAuth:   tls.RequireAndVerifyClientCert,
				ClientCAs:    b.CAs,
				NextProtos:   []string{"h2"},
			}, nil
		},
	}
}

// ClientTLS is the config for calls to other nodes' apid: the node's client certificate, and
// the server verified against the current CA bundle (so a rotated CA applies to pooled
// connections' next handshake too).
func (s *Store) ClientTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			b := s.Current()

			return &b.Client, nil
		},
		// Verification is done in VerifyConnection against the current bundle.
		InsecureSkipVerify: true, //nolint:gosec // VerifyConnection below checks the chain against the current CA
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("server presented no certificate")
			}

			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}

			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
				Roots:         s.Current().CAs,
				Intermediates: inter,
				DNSName:       cs.ServerName,
				KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			})

			return err
		},
	}
}
