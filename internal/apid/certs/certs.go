// Package certs is apid's certificate folder: the file names, the writer machined uses, and a
// store that loads them and picks up rotated files without a restart.
package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/talos-go/talos/internal/filestore"
	"github.com/talos-go/talos/internal/pki"
)

// Files in apid's certificate folder. Keys are written 0600.
const (
	CA        = "ca.crt"     // OS CA bundle: verifies clients and other nodes' apid
	ServerCrt = "server.crt" // apid's serving certificate (node addresses, hostname, certSANs)
	ServerKey = "server.key"
	ClientCrt = "client.crt" // a control plane's client certificate (os:impersonator), for node-to-node calls
	ClientKey = "client.key"
)

// All lists every file of the folder, in the order WriteFiles replaces them: keys and
// certificates first, the CA bundle last.
var All = []string{ServerKey, ServerCrt, ClientKey, ClientCrt, CA}

// clientFiles are the files only a node holding the OS CA key has: a worker has no client
// certificate, so its files carry no role and its apid forwards to no other node.
var clientFiles = []string{ClientKey, ClientCrt}

// Required are the files every node's folder holds before apid can start.
var Required = []string{ServerKey, ServerCrt, CA}

// WriteFiles writes apid's folder (0700), each file 0600 and replaced atomically, so apid never
// reads a half-written file. Without the client files in files, those on disk are removed (a
// worker from before workers lost them keeps none).
func WriteFiles(dir string, files map[string][]byte) error {
	order := slices.DeleteFunc(slices.Clone(All), func(name string) bool {
		_, ok := files[name]

		return !ok && slices.Contains(clientFiles, name)
	})

	if err := pki.WriteFiles(dir, order, files); err != nil {
		return err
	}

	for _, name := range clientFiles {
		if _, ok := files[name]; ok {
			continue
		}

		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing %s: %w", name, err)
		}
	}

	return nil
}

// Bundle is one consistent load of the folder.
type Bundle struct {
	Server tls.Certificate
	// Client is nil on a node without a client certificate (a worker).
	Client *tls.Certificate
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

	b := &Bundle{Server: server, CAs: pool, Loaded: time.Now()}

	if _, err = os.Stat(filepath.Join(dir, ClientCrt)); errors.Is(err, fs.ErrNotExist) {
		return b, nil
	}

	client, err := pair(ClientCrt, ClientKey)
	if err != nil {
		return nil, err
	}

	b.Client = &client

	return b, nil
}

// Store holds the current bundle and reloads it when the files change.
type Store struct {
	*filestore.Store[*Bundle]
}

// NewStore loads dir; it fails when the folder is not complete and valid (the client files
// may be missing together).
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
			if c := s.Current().Client; c != nil {
				return c, nil
			}

			// No certificate to send: the other node refuses the call (a worker forwards
			// nowhere; Server.direct refuses before dialing).
			return &tls.Certificate{}, nil
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

// CanForward reports whether this node holds a client certificate, without which no other
// node's apid takes its calls.
func (s *Store) CanForward() bool { return s.Current().Client != nil }
