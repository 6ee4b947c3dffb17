// Package secrets holds apid's certificate folder: WriteAPID writes it (the secrets controllers
// call it with the certificates they issue), and Issue makes a complete set from a CA in one
// step, for the test harnesses that run apid without a machined.
package secrets

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"

	tx509 "github.com/siderolabs/crypto/x509"

	"github.com/talos-go/talos/internal/apid/certs"
)

// APIDLifetime is how long Issue's certificates are valid unless the request says otherwise:
// a day, as the secrets controllers issue them.
const APIDLifetime = 24 * time.Hour

// APIDRequest is everything apid's certificates are made from.
type APIDRequest struct {
	CACert, CAKey []byte   // PEM issuing CA (machine.ca)
	AcceptedCAs   [][]byte // PEM, extra CAs trusted during rotation
	Addresses     []string // node addresses (IP SANs)
	Hostname      string
	CertSANs      []string // machine.certSANs (IPs or DNS names)
	Lifetime      time.Duration
}

// sans splits the wanted names into IPs and DNS names, sorted and without duplicates.
func (r APIDRequest) sans() (ips []net.IP, dns []string) {
	seenIP := map[string]bool{}

	for _, s := range append(append(append([]string{}, r.Addresses...), r.CertSANs...), r.Hostname) {
		if s == "" {
			continue
		}

		if ip := net.ParseIP(s); ip != nil {
			if !seenIP[ip.String()] {
				seenIP[ip.String()] = true
				ips = append(ips, ip)
			}
		} else if !slices.Contains(dns, s) {
			dns = append(dns, s)
		}
	}

	slices.SortFunc(ips, func(a, b net.IP) int { return bytes.Compare(a.To16(), b.To16()) })
	slices.Sort(dns)

	return ips, dns
}

// Issue issues apid's files from a request.
func Issue(r APIDRequest) (map[string][]byte, error) {
	caCert, err := (&tx509.PEMEncodedCertificateAndKey{Crt: r.CACert, Key: r.CAKey}).GetCert()
	if err != nil {
		return nil, fmt.Errorf("parsing machine.ca certificate: %w", err)
	}

	caKey, err := (&tx509.PEMEncodedCertificateAndKey{Crt: r.CACert, Key: r.CAKey}).GetKey()
	if err != nil {
		return nil, fmt.Errorf("parsing machine.ca key: %w", err)
	}

	lifetime := r.Lifetime
	if lifetime == 0 {
		lifetime = APIDLifetime
	}

	now := time.Now()
	notAfter := now.Add(lifetime)

	if notAfter.After(caCert.NotAfter) {
		notAfter = caCert.NotAfter
	}

	ips, dns := r.sans()

	server, serverKey, err := sign(caCert, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: firstNonEmpty(r.Hostname, "apid")},
		IPAddresses: ips,
		DNSNames:    dns,
		NotBefore:   now.Add(-time.Minute),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return nil, fmt.Errorf("issuing apid server certificate: %w", err)
	}

	client, clientKey, err := sign(caCert, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: firstNonEmpty(r.Hostname, "apid"), Organization: []string{string(role.Impersonator)}},
		NotBefore:   now.Add(-time.Minute),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, fmt.Errorf("issuing node client certificate: %w", err)
	}

	return map[string][]byte{
		certs.CA:        r.caBundle(),
		certs.ServerCrt: server,
		certs.ServerKey: serverKey,
		certs.ClientCrt: client,
		certs.ClientKey: clientKey,
	}, nil
}

// caBundle is the CA file: the issuing CA, then the accepted ones.
func (r APIDRequest) caBundle() []byte {
	bundle := append([]byte{}, r.CACert...)
	for _, acc := range r.AcceptedCAs {
		bundle = append(bundle, '\n')
		bundle = append(bundle, acc...)
	}

	return bundle
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}

	return ""
}

// sign makes a fresh ECDSA P-256 key and a certificate for it signed by the CA.
func sign(ca *x509.Certificate, caKey any, tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}

	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}

	tmpl.SerialNumber = serial

	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}

	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}

	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// WriteAPID writes apid's files into dir, each 0600 and replaced atomically (write then
// rename), so apid never reads a half-written file.
func WriteAPID(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}

	// Keys and certificates first, the CA bundle last.
	for _, name := range []string{certs.ServerKey, certs.ServerCrt, certs.ClientKey, certs.ClientCrt, certs.CA} {
		data, ok := files[name]
		if !ok {
			return fmt.Errorf("missing %s", name)
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
