package etcd

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/talos-go/talos/internal/pki"
)

// File names under the secrets folder (Secrets("etcd")). Every file is written 0600, the
// folder 0700.
const (
	FileCA         = "ca.crt"
	FilePeerCert   = "peer.crt"
	FilePeerKey    = "peer.key"
	FileServerCert = "server.crt"
	FileServerKey  = "server.key"
	FileClientCert = "client.crt" // machined's own client identity (admin on etcd)
	FileClientKey  = "client.key"
)

// certValidity is how long issued leaf certificates live; they are re-issued on every start
// of the service.
const certValidity = 365 * 24 * time.Hour

// CertPaths are the files etcd and machined's etcd client use.
type CertPaths struct {
	Dir string
}

// Path returns the full path of one of the File* names.
func (p CertPaths) Path(name string) string { return filepath.Join(p.Dir, name) }

// CertRequest describes the node a set of etcd certificates is for.
type CertRequest struct {
	Name string   // member name (also a DNS SAN)
	IPs  []net.IP // node addresses; loopback is always added to the server certificate
}

// WriteCertificates issues the peer, server and client certificates for this node from the CA
// (the config's cluster.etcd.ca) and writes them, with the CA certificate, into dir (0700),
// every file 0600.
func WriteCertificates(ca *pki.CA, dir string, req CertRequest) (CertPaths, error) {
	paths := CertPaths{Dir: dir}
	dns := []string{"localhost"}

	if req.Name != "" {
		dns = append(dns, req.Name)
	}

	cn := req.Name
	if cn == "" {
		cn = "etcd"
	}

	serverIPs := append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, req.IPs...)
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}

	leaves := []struct {
		cert, key string
		leaf      pki.Leaf
	}{
		{FilePeerCert, FilePeerKey, pki.Leaf{CommonName: cn, IPs: req.IPs, DNSNames: dns, ExtKeyUsages: both}},
		{FileServerCert, FileServerKey, pki.Leaf{CommonName: cn, IPs: serverIPs, DNSNames: dns, ExtKeyUsages: both}},
		{FileClientCert, FileClientKey, pki.Leaf{CommonName: "talos-machined", ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}},
	}

	files := map[string][]byte{FileCA: ca.CrtPEM}
	now := time.Now()

	for _, l := range leaves {
		l.leaf.Lifetime = certValidity

		pair, err := ca.Issue(l.leaf, now)
		if err != nil {
			return paths, fmt.Errorf("issuing etcd certificate %s: %w", l.cert, err)
		}

		files[l.cert], files[l.key] = pair.Crt, pair.Key
	}

	return paths, pki.WriteFiles(dir, fileOrder, files)
}

// fileOrder is the order the files are written in: etcd starts after all are.
var fileOrder = []string{FilePeerKey, FilePeerCert, FileServerKey, FileServerCert, FileClientKey, FileClientCert, FileCA}

// ClientTLS is the TLS config of machined's etcd client.
func (p CertPaths) ClientTLS() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(p.Path(FileClientCert), p.Path(FileClientKey))
	if err != nil {
		return nil, fmt.Errorf("loading etcd client certificate: %w", err)
	}

	caPEM, err := os.ReadFile(p.Path(FileCA))
	if err != nil {
		return nil, fmt.Errorf("loading etcd CA: %w", err)
	}

	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("etcd CA: no certificate found")
	}

	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		MinVersion:   tls.VersionTLS12,
	}, nil
}
