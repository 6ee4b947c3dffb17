// Package pki is the one place keys and certificates are made: a CA parsed from a config signs
// leaf certificates (etcd's, apid's, trustd's, client certificates, kubeconfigs), workers make
// CSRs for trustd, the maintenance API makes its self-signed certificate, and WriteFiles puts
// keys on disk 0600.
//
// Every certificate follows one policy: an ECDSA P-256 key whatever the CA's key type, a
// random 128-bit serial, valid from Backdate before now for its lifetime but never beyond its
// CA, digital signature usage (plus key encipherment for RSA keys), and never a CA.
//
// github.com/siderolabs/crypto/x509 parses the CAs and makes the serials. Its signing helpers
// are not used: they copy the CSR's signature algorithm into the certificate, which fails when
// an Ed25519 CA (Talos's default machine.ca) signs an ECDSA key, and they give leaves the CA's
// key type.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"time"

	cx509 "github.com/siderolabs/crypto/x509"
)

// Backdate is how long before its issue a certificate becomes valid, so that a peer whose clock
// is a little behind ours accepts a certificate issued just now.
const Backdate = time.Minute

// CA is a certificate authority that signs: the machine's, Kubernetes' or etcd's CA from the
// config.
type CA struct {
	Crt    *x509.Certificate
	CrtPEM []byte
	Key    crypto.Signer
}

// ParseCA parses a PEM certificate (the first block) and its PEM private key (PKCS#8, EC,
// PKCS#1 RSA or Talos's "ED25519 PRIVATE KEY") and checks that the key is the certificate's.
func ParseCA(crtPEM, keyPEM []byte) (*CA, error) {
	crt, err := (&cx509.PEMEncodedCertificate{Crt: crtPEM}).GetCert()
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}

	key, err := (&cx509.PEMEncodedCertificateAndKey{Crt: crtPEM, Key: keyPEM}).GetKey()
	if err != nil {
		return nil, fmt.Errorf("CA private key: %w", err)
	}

	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("CA private key: a %T cannot sign", key)
	}

	pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(crt.PublicKey) {
		return nil, errors.New("CA private key does not match the CA certificate")
	}

	return &CA{Crt: crt, CrtPEM: crtPEM, Key: signer}, nil
}

// Leaf is what a certificate says: whom it is for, the names it serves, what it may be used for
// and for how long.
type Leaf struct {
	CommonName    string
	Organizations []string // Talos roles, Kubernetes groups
	IPs           []net.IP
	DNSNames      []string
	ExtKeyUsages  []x509.ExtKeyUsage
	Lifetime      time.Duration
}

// template is the certificate for pub issued at now, before capping at the issuer's expiry.
func (l Leaf) template(pub crypto.PublicKey, now time.Time) (*x509.Certificate, error) {
	if l.Lifetime <= 0 {
		return nil, fmt.Errorf("certificate %q: lifetime %v must be positive", l.CommonName, l.Lifetime)
	}

	if len(l.ExtKeyUsages) == 0 {
		return nil, fmt.Errorf("certificate %q: no extended key usage (server or client authentication) given", l.CommonName)
	}

	serial, err := cx509.NewSerialNumber()
	if err != nil {
		return nil, err
	}

	usage := x509.KeyUsageDigitalSignature
	if _, ok := pub.(*rsa.PublicKey); ok {
		// RSA key exchange encrypts with the certificate's key.
		usage |= x509.KeyUsageKeyEncipherment
	}

	return &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: l.CommonName, Organization: l.Organizations},
		IPAddresses:           l.IPs,
		DNSNames:              l.DNSNames,
		NotBefore:             now.Add(-Backdate),
		NotAfter:              now.Add(l.Lifetime),
		KeyUsage:              usage,
		ExtKeyUsage:           l.ExtKeyUsages,
		BasicConstraintsValid: true,
	}, nil
}

// Sign signs a certificate for pub (a key the caller holds, or a CSR's) and returns it PEM
// encoded. It expires with the CA at the latest.
func (ca *CA) Sign(pub crypto.PublicKey, l Leaf, now time.Time) ([]byte, error) {
	tmpl, err := l.template(pub, now)
	if err != nil {
		return nil, err
	}

	if tmpl.NotAfter.After(ca.Crt.NotAfter) {
		tmpl.NotAfter = ca.Crt.NotAfter
	}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Crt, pub, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("signing certificate %q: %w", l.CommonName, err)
	}

	return pem.EncodeToMemory(&pem.Block{Type: cx509.PEMTypeCertificate, Bytes: der}), nil
}

// Issue makes a new key and a certificate for it signed by the CA.
func (ca *CA) Issue(l Leaf, now time.Time) (*cx509.PEMEncodedCertificateAndKey, error) {
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, err
	}

	crt, err := ca.Sign(key.Public(), l, now)
	if err != nil {
		return nil, err
	}

	return &cx509.PEMEncodedCertificateAndKey{Crt: crt, Key: keyPEM}, nil
}

// SelfSigned makes a key and a certificate signed by that key, kept in memory (the maintenance
// API's, which clients do not verify).
func SelfSigned(l Leaf, now time.Time) (tls.Certificate, error) {
	key, _, err := newKey()
	if err != nil {
		return tls.Certificate{}, err
	}

	tmpl, err := l.template(key.Public(), now)
	if err != nil {
		return tls.Certificate{}, err
	}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("self-signing certificate %q: %w", l.CommonName, err)
	}

	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// newKey makes an ECDSA P-256 key and its PEM encoding ("EC PRIVATE KEY").
func newKey() (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}

	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}

	return key, pem.EncodeToMemory(&pem.Block{Type: cx509.PEMTypeECPrivate, Bytes: der}), nil
}
