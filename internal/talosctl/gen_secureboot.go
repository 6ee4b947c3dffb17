package talosctl

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/foxboron/go-uefi/efi/signature"
	"github.com/foxboron/go-uefi/efi/util"
	"github.com/foxboron/go-uefi/efivar"
	"github.com/spf13/cobra"
)

// Upstream's file names in the output folder.
const (
	ukiSigningCert = "uki-signing-cert.pem"
	ukiSigningKey  = "uki-signing-key.pem"
	pcrSigningKey  = "pcr-signing-key.pem"
)

// genSecurebootCmd generates SecureBoot material: the UKI signing key and certificate, the PCR
// signing key, and the UEFI key databases (PK, KEK, db) that enroll the UKI certificate.
func genSecurebootCmd(force *bool) *cobra.Command {
	var out string

	cmd := &cobra.Command{
		Use:   "secureboot",
		Short: "Generates secrets for the SecureBoot process",
	}

	cmd.PersistentFlags().StringVarP(&out, "output", "o", "_out", "path to the directory storing the generated files")

	cmd.AddCommand(genSecurebootUKICmd(force, &out), genSecurebootPCRCmd(force, &out), genSecurebootDatabaseCmd(force, &out))

	return cmd
}

func genSecurebootUKICmd(force *bool, out *string) *cobra.Command {
	var commonName string

	cmd := &cobra.Command{
		Use:   "uki",
		Short: "Generates a certificate which is used to sign boot assets (UKI)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, keyPEM, err := rsaKey()
			if err != nil {
				return err
			}

			certPEM, err := selfSignedCert(key, commonName, time.Now())
			if err != nil {
				return err
			}

			return writeSecureboot(cmd, *force, *out, []file{{ukiSigningKey, keyPEM}, {ukiSigningCert, certPEM}})
		},
	}

	cmd.Flags().StringVar(&commonName, "common-name", "Test UKI Signing Key", "common name for the certificate")

	return cmd
}

func genSecurebootPCRCmd(force *bool, out *string) *cobra.Command {
	return &cobra.Command{
		Use:   "pcr",
		Short: "Generates a key which is used to sign TPM PCR values",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, keyPEM, err := rsaKey()
			if err != nil {
				return err
			}

			return writeSecureboot(cmd, *force, *out, []file{{pcrSigningKey, keyPEM}})
		},
	}
}

func genSecurebootDatabaseCmd(force *bool, out *string) *cobra.Command {
	var (
		enrolled, signingCert, signingKey string
		wellKnown                         bool
	)

	cmd := &cobra.Command{
		Use:   "database",
		Short: "Generates a UEFI database to enroll the signing certificate",
		Long: `Generates PK.auth, KEK.auth and db.auth: UEFI authenticated variables, signed with the
signing key, that enroll the signing certificate as platform and key-exchange key and the
enrolled certificate in the signature database.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if wellKnown {
				return errors.New("--include-well-known-uefi-certs: the Microsoft UEFI certificates are not bundled with this talosctl; leave the flag out")
			}

			files, err := uefiDatabase(enrolled, signingCert, signingKey)
			if err != nil {
				return err
			}

			return writeSecureboot(cmd, *force, *out, files)
		},
	}

	def := func(name string) string { return filepath.Join("_out", name) }

	cmd.Flags().StringVar(&enrolled, "enrolled-certificate", def(ukiSigningCert), "path to the certificate to enroll")
	cmd.Flags().StringVar(&signingCert, "signing-certificate", def(ukiSigningCert), "path to the certificate used to sign the database")
	cmd.Flags().StringVar(&signingKey, "signing-key", def(ukiSigningKey), "path to the key used to sign the database")
	cmd.Flags().BoolVar(&wellKnown, "include-well-known-uefi-certs", false, "include well-known UEFI (Microsoft) certificates in the database")

	return cmd
}

// uefiDatabase builds the three signed variables: db holds the enrolled certificate, KEK and PK
// the signing certificate, each an EFI_VARIABLE_AUTHENTICATION_2 over its signature list.
func uefiDatabase(enrolledPath, certPath, keyPath string) ([]file, error) {
	enrolled, err := readPEMCert("--enrolled-certificate", enrolledPath)
	if err != nil {
		return nil, err
	}

	cert, err := readPEMCert("--signing-certificate", certPath)
	if err != nil {
		return nil, err
	}

	key, err := readKey(keyPath)
	if err != nil {
		return nil, fmt.Errorf("--signing-key: %w", err)
	}

	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("--signing-key %s: not a signing key", keyPath)
	}

	owner := util.StringToGUID(randomGUID())

	var files []file

	for _, v := range []struct {
		name string
		vr   efivar.Efivar
		cert *x509.Certificate
	}{
		{"db.auth", efivar.Db, enrolled},
		{"KEK.auth", efivar.KEK, cert},
		{"PK.auth", efivar.PK, cert},
	} {
		db := signature.NewSignatureDatabase()
		if err = db.Append(signature.CERT_X509_GUID, *owner, v.cert.Raw); err != nil {
			return nil, fmt.Errorf("%s: %w", v.name, err)
		}

		_, signed, err := signature.SignEFIVariable(v.vr, db, signer, cert)
		if err != nil {
			return nil, fmt.Errorf("signing %s: %w", v.name, err)
		}

		files = append(files, file{v.name, signed.Bytes()})
	}

	return files, nil
}

func readPEMCert(flag, path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}

	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s %s: not a PEM CERTIFICATE", flag, path)
	}

	return x509.ParseCertificate(block.Bytes)
}

// rsaKey makes the 4096-bit RSA key UEFI firmware and systemd-measure both accept.
func rsaKey() (*rsa.PrivateKey, []byte, error) {
	key, err := rsa.GenerateKey(rand.Reader, 4096)
	if err != nil {
		return nil, nil, err
	}

	return key, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), nil
}

// selfSignedCert is a code-signing certificate for the key, valid five years.
func selfSignedCert(key *rsa.PrivateKey, commonName string, now time.Time) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}

	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.AddDate(5, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning},
		BasicConstraintsValid: true,
	}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}

	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

func randomGUID() string {
	var b [16]byte

	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant

	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// writeSecureboot writes the files into the output folder (made if missing), all or none.
func writeSecureboot(cmd *cobra.Command, force bool, dir string, files []file) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("--output: %w", err)
	}

	for i := range files {
		files[i].path = filepath.Join(dir, files[i].path)
	}

	return writeAll(cmd, force, files)
}
