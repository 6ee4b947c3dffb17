package trustd

import (
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"time"

	"github.com/talos-go/talos/internal/pki"
)

// DefaultLifetime is the lifetime of the certificates trustd signs: a day, as Talos's own.
const DefaultLifetime = 24 * time.Hour

var (
	oidBasicConstraints = asn1.ObjectIdentifier{2, 5, 29, 19}
	oidKeyUsage         = asn1.ObjectIdentifier{2, 5, 29, 15}
	oidSubjectAltName   = asn1.ObjectIdentifier{2, 5, 29, 17}
)

// ErrPolicy marks a CSR that trustd will not sign.
var ErrPolicy = errors.New("certificate request refused")

// CheckCSR parses a PEM CSR and checks it asks only for a node's server certificate: a valid
// signature, no CA, no key usages beyond digital signature and key encipherment, no extended
// usage but server authentication, no organization (a role: the join token must never buy one,
// as upstream after CVE-2022-36103), and no other requested extensions besides subject
// alternative names. It returns the CSR.
func CheckCSR(csrPEM []byte) (*x509.CertificateRequest, error) {
	csr, err := pki.ParseCSR(csrPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPolicy, err)
	}

	if len(csr.Subject.Organization) > 0 {
		return nil, fmt.Errorf("%w: organization %q is not allowed: trustd signs server certificates only, which carry no role", ErrPolicy, csr.Subject.Organization)
	}

	if len(csr.Subject.OrganizationalUnit) > 0 {
		return nil, fmt.Errorf("%w: organizational units are not allowed", ErrPolicy)
	}

	for _, ext := range csr.Extensions {
		switch {
		case ext.Id.Equal(oidSubjectAltName):
			if len(csr.URIs) > 0 || len(csr.EmailAddresses) > 0 {
				return nil, fmt.Errorf("%w: only IP and DNS alternative names are allowed", ErrPolicy)
			}
		case ext.Id.Equal(oidBasicConstraints):
			var bc struct {
				IsCA       bool `asn1:"optional"`
				MaxPathLen int  `asn1:"optional,default:-1"`
			}

			if _, err = asn1.Unmarshal(ext.Value, &bc); err != nil {
				return nil, fmt.Errorf("%w: parsing basic constraints: %w", ErrPolicy, err)
			}

			if bc.IsCA {
				return nil, fmt.Errorf("%w: a CA certificate cannot be requested", ErrPolicy)
			}
		case ext.Id.Equal(oidKeyUsage):
			var bits asn1.BitString
			if _, err = asn1.Unmarshal(ext.Value, &bits); err != nil {
				return nil, fmt.Errorf("%w: parsing key usage: %w", ErrPolicy, err)
			}

			// digitalSignature (0) and keyEncipherment (2) only.
			for i := range bits.BitLength {
				if bits.At(i) == 1 && i != 0 && i != 2 {
					return nil, fmt.Errorf("%w: key usage bit %d is not allowed in a node certificate", ErrPolicy, i)
				}
			}
		case ext.Id.Equal(pki.OIDExtKeyUsage):
			ekus, err := pki.ParseExtKeyUsages(ext.Value)
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrPolicy, err)
			}

			for _, u := range ekus {
				if u != x509.ExtKeyUsageServerAuth {
					return nil, fmt.Errorf("%w: extended key usage %d is not allowed: trustd signs server certificates only; a control plane issues its own client certificate", ErrPolicy, u)
				}
			}
		default:
			return nil, fmt.Errorf("%w: extension %s is not allowed", ErrPolicy, ext.Id)
		}
	}

	return csr, nil
}

// Sign issues a node's server certificate for a checked CSR: the CSR's common name and IP/DNS
// names, server authentication only, no organization, never a CA, valid for lifetime but not
// beyond the CA. Such a certificate is refused as a client certificate by every apid.
func Sign(ca *pki.CA, csr *x509.CertificateRequest, lifetime time.Duration, now time.Time) ([]byte, error) {
	return ca.Sign(csr.PublicKey, pki.Leaf{
		CommonName:   csr.Subject.CommonName,
		IPs:          csr.IPAddresses,
		DNSNames:     csr.DNSNames,
		ExtKeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		Lifetime:     lifetime,
	}, now)
}
