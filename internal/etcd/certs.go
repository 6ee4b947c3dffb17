package etcd

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
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

// CA is a parsed certificate authority (the config's cluster.etcd.ca).
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	Key     crypto.Signer
}

// ParseCA parses a PEM certificate and its PEM private key (PKCS#8, EC or PKCS#1).
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return nil, errors.New("etcd CA: no PEM certificate")
	}

	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("etcd CA: parsing certificate: %w", err)
	}

	kblock, _ := pem.Decode(keyPEM)
	if kblock == nil {
		return nil, errors.New("etcd CA: no PEM private key")
	}

	var key any

	switch kblock.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(kblock.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(kblock.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(kblock.Bytes)
	}

	if err != nil {
		return nil, fmt.Errorf("etcd CA: parsing private key: %w", err)
	}

	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, errors.New("etcd CA: private key cannot sign")
	}

	pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return nil, errors.New("etcd CA: private key does not match the certificate")
	}

	return &CA{Cert: cert, CertPEM: certPEM, Key: signer}, nil
}

// GenerateCA makes a new self-signed CA (tests and tooling; nodes use the config's CA).
func GenerateCA() (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}

	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "etcd", Organization: []string{"etcd"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * certValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
	}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}

	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}

	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(err)
	}

	return n
}

// CertRequest describes the node a set of etcd certificates is for.
type CertRequest struct {
	Name string   // member name (also a DNS SAN)
	IPs  []net.IP // node addresses; loopback is always added to the server certificate
}

// WriteCertificates issues the peer, server and client certificates for this node from the CA
// and writes them, with the CA certificate, into dir (0700), every file 0600.
func WriteCertificates(ca *CA, dir string, req CertRequest) (CertPaths, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return CertPaths{}, fmt.Errorf("creating %s: %w", dir, err)
	}

	if err := os.Chmod(dir, 0o700); err != nil { //nolint:gosec // a directory: 0700 is owner-only
		return CertPaths{}, fmt.Errorf("securing %s: %w", dir, err)
	}

	paths := CertPaths{Dir: dir}
	dns := []string{"localhost"}

	if req.Name != "" {
		dns = append(dns, req.Name)
	}

	serverIPs := append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, req.IPs...)

	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}

	leaves := []struct {
		cert, key string
		cn        string
		ips       []net.IP
		dns       []string
		usage     []x509.ExtKeyUsage
	}{
		{FilePeerCert, FilePeerKey, req.Name, req.IPs, dns, both},
		{FileServerCert, FileServerKey, req.Name, serverIPs, dns, both},
		{FileClientCert, FileClientKey, "talos-machined", nil, nil, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
	}

	for _, l := range leaves {
		certPEM, keyPEM, err := issue(ca, l.cn, l.ips, l.dns, l.usage)
		if err != nil {
			return paths, fmt.Errorf("issuing etcd certificate %s: %w", l.cert, err)
		}

		if err := writeSecret(paths.Path(l.cert), certPEM); err != nil {
			return paths, err
		}

		if err := writeSecret(paths.Path(l.key), keyPEM); err != nil {
			return paths, err
		}
	}

	if err := writeSecret(paths.Path(FileCA), ca.CertPEM); err != nil {
		return paths, err
	}

	return paths, nil
}

func issue(ca *CA, cn string, ips []net.IP, dns []string, usage []x509.ExtKeyUsage) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}

	if cn == "" {
		cn = "etcd"
	}

	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-5 * time.Minute),
		NotAfter:     time.Now().Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  usage,
		IPAddresses:  ips,
		DNSNames:     dns,
	}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, err
	}

	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}

	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

// writeSecret writes data atomically with mode 0600.
func writeSecret(path string, data []byte) error {
	tmp := path + ".tmp"

	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}

	if err := os.Chmod(tmp, 0o600); err != nil {
		return fmt.Errorf("securing %s: %w", path, err)
	}

	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}

	return nil
}

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
