package trustd

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"
)

// DefaultLifetime is the lifetime of the certificates trustd signs: a day, as Talos's own.
const DefaultLifetime = 24 * time.Hour

var (
	oidBasicConstraints = asn1.ObjectIdentifier{2, 5, 29, 19}
	oidKeyUsage         = asn1.ObjectIdentifier{2, 5, 29, 15}
	oidExtKeyUsage      = asn1.ObjectIdentifier{2, 5, 29, 37}
	oidSubjectAltName   = asn1.ObjectIdentifier{2, 5, 29, 17}

	oidServerAuth = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 3, 1}
	oidClientAuth = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 3, 2}
)

// ErrPolicy marks a CSR that trustd will not sign.
var ErrPolicy = errors.New("certificate request refused")

// allowedOrganizations are the subject organizations a node certificate may carry: none (a
// server certificate) or the node's own role for node-to-node calls.
var allowedOrganizations = []string{string(role.Impersonator)}

// CheckCSR parses a PEM CSR and checks it asks only for a node certificate: a valid signature,
// no CA, no key usages beyond digital signature and key encipherment, no extended usages beyond
// server and client authentication, no organization (role) but os:impersonator, and no other
// requested extensions besides subject alternative names. It returns the requested extended
// usages.
func CheckCSR(csrPEM []byte) (*x509.CertificateRequest, []x509.ExtKeyUsage, error) {
	block, _ := pem.Decode(csrPEM)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, nil, fmt.Errorf("%w: csr is not a PEM certificate request", ErrPolicy)
	}

	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: parsing csr: %w", ErrPolicy, err)
	}

	if err = csr.CheckSignature(); err != nil {
		return nil, nil, fmt.Errorf("%w: csr signature: %w", ErrPolicy, err)
	}

	for _, o := range csr.Subject.Organization {
		if !slices.Contains(allowedOrganizations, o) {
			return nil, nil, fmt.Errorf("%w: organization %q is not allowed in a node certificate", ErrPolicy, o)
		}
	}

	if len(csr.Subject.OrganizationalUnit) > 0 {
		return nil, nil, fmt.Errorf("%w: organizational units are not allowed", ErrPolicy)
	}

	var ekus []x509.ExtKeyUsage

	for _, ext := range csr.Extensions {
		switch {
		case ext.Id.Equal(oidSubjectAltName):
			if len(csr.URIs) > 0 || len(csr.EmailAddresses) > 0 {
				return nil, nil, fmt.Errorf("%w: only IP and DNS alternative names are allowed", ErrPolicy)
			}
		case ext.Id.Equal(oidBasicConstraints):
			var bc struct {
				IsCA       bool `asn1:"optional"`
				MaxPathLen int  `asn1:"optional,default:-1"`
			}

			if _, err = asn1.Unmarshal(ext.Value, &bc); err != nil {
				return nil, nil, fmt.Errorf("%w: parsing basic constraints: %w", ErrPolicy, err)
			}

			if bc.IsCA {
				return nil, nil, fmt.Errorf("%w: a CA certificate cannot be requested", ErrPolicy)
			}
		case ext.Id.Equal(oidKeyUsage):
			var bits asn1.BitString
			if _, err = asn1.Unmarshal(ext.Value, &bits); err != nil {
				return nil, nil, fmt.Errorf("%w: parsing key usage: %w", ErrPolicy, err)
			}

			// digitalSignature (0) and keyEncipherment (2) only.
			for i := range bits.BitLength {
				if bits.At(i) == 1 && i != 0 && i != 2 {
					return nil, nil, fmt.Errorf("%w: key usage bit %d is not allowed in a node certificate", ErrPolicy, i)
				}
			}
		case ext.Id.Equal(oidExtKeyUsage):
			var oids []asn1.ObjectIdentifier
			if _, err = asn1.Unmarshal(ext.Value, &oids); err != nil {
				return nil, nil, fmt.Errorf("%w: parsing extended key usage: %w", ErrPolicy, err)
			}

			for _, oid := range oids {
				switch {
				case oid.Equal(oidServerAuth):
					ekus = append(ekus, x509.ExtKeyUsageServerAuth)
				case oid.Equal(oidClientAuth):
					ekus = append(ekus, x509.ExtKeyUsageClientAuth)
				default:
					return nil, nil, fmt.Errorf("%w: extended key usage %s is not allowed in a node certificate", ErrPolicy, oid)
				}
			}
		default:
			return nil, nil, fmt.Errorf("%w: extension %s is not allowed", ErrPolicy, ext.Id)
		}
	}

	return csr, ekus, nil
}

// Sign issues a node certificate for a checked CSR: the CSR's subject and IP/DNS names, the
// requested extended usages (server and client authentication when none were asked for),
// never a CA, valid for lifetime but not beyond the CA.
func Sign(ca *x509.Certificate, caKey crypto.Signer, csr *x509.CertificateRequest, ekus []x509.ExtKeyUsage, lifetime time.Duration, now time.Time) ([]byte, error) {
	if len(ekus) == 0 {
		ekus = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}

	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}

	notAfter := now.Add(lifetime)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}

	usage := x509.KeyUsageDigitalSignature
	if _, ok := csr.PublicKey.(*rsa.PublicKey); ok {
		usage |= x509.KeyUsageKeyEncipherment
	}

	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: csr.Subject.CommonName, Organization: csr.Subject.Organization},
		IPAddresses:           csr.IPAddresses,
		DNSNames:              csr.DNSNames,
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              notAfter,
		KeyUsage:              usage,
		ExtKeyUsage:           ekus,
		BasicConstraintsValid: true,
		IsCA:                  false,
	}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, csr.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("signing certificate: %w", err)
	}

	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}
