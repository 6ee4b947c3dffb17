package trustd

import (
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"

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

// allowedOrganizations are the subject organizations a node certificate may carry: none (a
// server certificate) or the node's own role for node-to-node calls.
var allowedOrganizations = []string{string(role.Impersonator)}

// CheckCSR parses a PEM CSR and checks it asks only for a node certificate: a valid signature,
// no CA, no key usages beyond digital signature and key encipherment, no extended usages beyond
// server and client authentication, no organization (role) but os:impersonator, and no other
// requested extensions besides subject alternative names. It returns the requested extended
// usages.
func CheckCSR(csrPEM []byte) (*x509.CertificateRequest, []x509.ExtKeyUsage, error) {
	csr, err := pki.ParseCSR(csrPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrPolicy, err)
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
		case ext.Id.Equal(pki.OIDExtKeyUsage):
			if ekus, err = pki.ParseExtKeyUsages(ext.Value); err != nil {
				return nil, nil, fmt.Errorf("%w: %w", ErrPolicy, err)
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
func Sign(ca *pki.CA, csr *x509.CertificateRequest, ekus []x509.ExtKeyUsage, lifetime time.Duration, now time.Time) ([]byte, error) {
	if len(ekus) == 0 {
		ekus = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}

	return ca.Sign(csr.PublicKey, pki.Leaf{
		CommonName:    csr.Subject.CommonName,
		Organizations: csr.Subject.Organization,
		IPs:           csr.IPAddresses,
		DNSNames:      csr.DNSNames,
		ExtKeyUsages:  ekus,
		Lifetime:      lifetime,
	}, now)
}
