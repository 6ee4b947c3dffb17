package pki

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"

	cx509 "github.com/siderolabs/crypto/x509"
)

// OIDExtKeyUsage is the extended key usage extension. A CSR carries the usages it asks for in
// it (Go's CertificateRequest has no field for them), and trustd reads them back.
var OIDExtKeyUsage = asn1.ObjectIdentifier{2, 5, 29, 37}

// extKeyUsageOIDs are the usages a node certificate may ask for.
var extKeyUsageOIDs = map[x509.ExtKeyUsage]asn1.ObjectIdentifier{
	x509.ExtKeyUsageServerAuth: {1, 3, 6, 1, 5, 5, 7, 3, 1},
	x509.ExtKeyUsageClientAuth: {1, 3, 6, 1, 5, 5, 7, 3, 2},
}

// NewCSR makes a key and a PEM CSR asking for l's subject, names and extended key usages (a
// worker's, for trustd to sign).
func NewCSR(l Leaf) (csrPEM, keyPEM []byte, err error) {
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, nil, err
	}

	csrPEM, err = keyCSR(l, key)

	return csrPEM, keyPEM, err
}

// CSRForKey is NewCSR for an existing PEM key ("EC PRIVATE KEY"): a node that keeps its key
// (join by approval: the key is what an admin approved).
func CSRForKey(l Leaf, keyPEM []byte) ([]byte, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("no PEM key")
	}

	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing key: %w", err)
	}

	return keyCSR(l, key)
}

// NewKey makes an ECDSA P-256 key, PEM encoded.
func NewKey() ([]byte, error) {
	_, keyPEM, err := newKey()

	return keyPEM, err
}

func keyCSR(l Leaf, key *ecdsa.PrivateKey) ([]byte, error) {
	oids := make([]asn1.ObjectIdentifier, 0, len(l.ExtKeyUsages))

	for _, u := range l.ExtKeyUsages {
		oid, ok := extKeyUsageOIDs[u]
		if !ok {
			return nil, fmt.Errorf("CSR %q: extended key usage %d cannot be requested", l.CommonName, u)
		}

		oids = append(oids, oid)
	}

	eku, err := asn1.Marshal(oids)
	if err != nil {
		return nil, err
	}

	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:         pkix.Name{CommonName: l.CommonName, Organization: l.Organizations},
		IPAddresses:     l.IPs,
		DNSNames:        l.DNSNames,
		ExtraExtensions: []pkix.Extension{{Id: OIDExtKeyUsage, Value: eku}},
	}, key)
	if err != nil {
		return nil, fmt.Errorf("creating CSR %q: %w", l.CommonName, err)
	}

	return pem.EncodeToMemory(&pem.Block{Type: cx509.PEMTypeCertificateRequest, Bytes: der}), nil
}

// ParseCSR decodes a PEM CSR and checks its signature.
func ParseCSR(data []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != cx509.PEMTypeCertificateRequest {
		return nil, errors.New("csr is not a PEM certificate request")
	}

	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing csr: %w", err)
	}

	if err = csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("csr signature: %w", err)
	}

	return csr, nil
}

// ParseExtKeyUsages decodes the value of an OIDExtKeyUsage extension. Only server and client
// authentication are known; any other usage is an error.
func ParseExtKeyUsages(value []byte) ([]x509.ExtKeyUsage, error) {
	var oids []asn1.ObjectIdentifier
	if _, err := asn1.Unmarshal(value, &oids); err != nil {
		return nil, fmt.Errorf("parsing extended key usage: %w", err)
	}

	usages := make([]x509.ExtKeyUsage, 0, len(oids))

	for _, oid := range oids {
		u, ok := usageOf(oid)
		if !ok {
			return nil, fmt.Errorf("extended key usage %s is not allowed in a node certificate", oid)
		}

		usages = append(usages, u)
	}

	return usages, nil
}

func usageOf(oid asn1.ObjectIdentifier) (x509.ExtKeyUsage, bool) {
	for u, known := range extKeyUsageOIDs {
		if oid.Equal(known) {
			return u, true
		}
	}

	return 0, false
}
