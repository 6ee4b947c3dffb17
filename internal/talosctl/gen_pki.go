package talosctl

import (
	stdx509 "crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"github.com/spf13/cobra"
)

// The `gen ca|keypair|key|csr|crt` commands write the same files as upstream's: PEM
// certificates and keys named after --organization or --name, keys and certificates 0600.

func genCACmd(force *bool) *cobra.Command {
	var (
		org   string
		hours int
		rsa   bool
	)

	cmd := &cobra.Command{
		Use:   "ca",
		Short: "Generates a self-signed X.509 certificate authority",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if hours <= 0 {
				return fmt.Errorf("--hours %d: the validity must be at least one hour", hours)
			}

			ca, err := x509.NewSelfSignedCertificateAuthority(x509.RSA(rsa), x509.Organization(org),
				x509.NotAfter(time.Now().Add(time.Duration(hours)*time.Hour)))
			if err != nil {
				return fmt.Errorf("generating CA: %w", err)
			}

			return writeAll(cmd, *force, []file{
				{org + ".crt", ca.CrtPEM},
				{org + ".sha256", []byte(x509.Hash(ca.Crt))},
				{org + ".key", ca.KeyPEM},
			})
		},
	}

	cmd.Flags().StringVar(&org, "organization", "", "X.509 distinguished name for the Organization")
	cmd.Flags().IntVar(&hours, "hours", 87600, "the hours from now on which the certificate validity period ends")
	cmd.Flags().BoolVar(&rsa, "rsa", false, "generate in RSA format")
	cmd.MarkFlagRequired("organization")

	return cmd
}

func genKeypairCmd(force *bool) *cobra.Command {
	var org, ip string

	cmd := &cobra.Command{
		Use:   "keypair",
		Short: "Generates an X.509 Ed25519 key pair",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts := []x509.Option{x509.Organization(org)}

			if ip != "" {
				parsed := net.ParseIP(ip)
				if parsed == nil {
					return fmt.Errorf("--ip %q is not an IP address", ip)
				}

				opts = append(opts, x509.IPAddresses([]net.IP{parsed}))
			}

			ca, err := x509.NewSelfSignedCertificateAuthority(opts...)
			if err != nil {
				return fmt.Errorf("generating key pair: %w", err)
			}

			return writeAll(cmd, *force, []file{{org + ".crt", ca.CrtPEM}, {org + ".key", ca.KeyPEM}})
		},
	}

	cmd.Flags().StringVar(&ip, "ip", "", "generate the certificate for this IP address")
	cmd.Flags().StringVar(&org, "organization", "", "X.509 distinguished name for the Organization")
	cmd.MarkFlagRequired("organization")

	return cmd
}

func genKeyCmd(force *bool) *cobra.Command {
	var name string

	cmd := &cobra.Command{
		Use:   "key",
		Short: "Generates an Ed25519 private key",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := x509.NewEd25519Key()
			if err != nil {
				return fmt.Errorf("generating key: %w", err)
			}

			return writeAll(cmd, *force, []file{{name + ".key", key.PrivateKeyPEM}})
		},
	}

	cmd.Flags().StringVar(&name, "name", "", "the basename of the generated file")
	cmd.MarkFlagRequired("name")

	return cmd
}

func genCSRCmd(force *bool) *cobra.Command {
	var (
		keyPath, ip string
		roles       []string
	)

	cmd := &cobra.Command{
		Use:   "csr",
		Short: "Generates a CSR using an Ed25519 private key",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			parsed := net.ParseIP(ip)
			if parsed == nil {
				return fmt.Errorf("--ip %q is not an IP address", ip)
			}

			set, unknown := role.Parse(roles)
			if len(unknown) > 0 {
				return fmt.Errorf("--roles: unknown roles %s (known: %s)", strings.Join(unknown, ", "), strings.Join(role.All.Strings(), ", "))
			}

			key, err := readKey(keyPath)
			if err != nil {
				return err
			}

			csr, err := x509.NewCertificateSigningRequest(key, x509.Organization(set.Strings()...), x509.IPAddresses([]net.IP{parsed}))
			if err != nil {
				return fmt.Errorf("generating CSR: %w", err)
			}

			out := strings.TrimSuffix(keyPath, filepath.Ext(keyPath)) + ".csr"

			return writeAll(cmd, *force, []file{{out, csr.X509CertificateRequestPEM}})
		},
	}

	cmd.Flags().StringVar(&keyPath, "key", "", "path to the PEM encoded EC or RSA PRIVATE KEY")
	cmd.Flags().StringVar(&ip, "ip", "", "generate the certificate for this IP address")
	cmd.Flags().StringSliceVar(&roles, "roles", role.MakeSet(role.Admin).Strings(), "roles")
	cmd.MarkFlagRequired("key")
	cmd.MarkFlagRequired("ip")

	return cmd
}

func genCrtCmd(force *bool) *cobra.Command {
	var (
		name, ca, csrPath string
		hours             int
	)

	cmd := &cobra.Command{
		Use:   "crt",
		Short: "Generates an X.509 Ed25519 certificate",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if hours <= 0 {
				return fmt.Errorf("--hours %d: the validity must be at least one hour", hours)
			}

			caCrt, err := os.ReadFile(ca + ".crt")
			if err != nil {
				return fmt.Errorf("--ca %s: reading the CA certificate: %w", ca, err)
			}

			caKey, err := os.ReadFile(ca + ".key")
			if err != nil {
				return fmt.Errorf("--ca %s: reading the CA key: %w", ca, err)
			}

			csr, err := os.ReadFile(csrPath)
			if err != nil {
				return fmt.Errorf("--csr: %w", err)
			}

			crt, err := x509.NewCertificateFromCSRBytes(caCrt, caKey, csr,
				x509.NotAfter(time.Now().Add(time.Duration(hours)*time.Hour)),
				x509.KeyUsage(stdx509.KeyUsageDigitalSignature),
				x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}))
			if err != nil {
				return fmt.Errorf("signing %s with CA %s: %w", csrPath, ca, err)
			}

			return writeAll(cmd, *force, []file{{name + ".crt", crt.X509CertificatePEM}})
		},
	}

	cmd.Flags().StringVar(&name, "name", "", "the basename of the generated file")
	cmd.Flags().StringVar(&ca, "ca", "", "path to the PEM encoded CERTIFICATE (without the .crt extension; its key is the .key beside it)")
	cmd.Flags().StringVar(&csrPath, "csr", "", "path to the PEM encoded CERTIFICATE REQUEST")
	cmd.Flags().IntVar(&hours, "hours", 24, "the hours from now on which the certificate validity period ends")

	for _, f := range []string{"name", "ca", "csr"} {
		cmd.MarkFlagRequired(f)
	}

	return cmd
}

type file struct {
	path string
	data []byte
}

// writeAll checks that no file exists (unless force) before writing any, so a refusal leaves
// nothing half written.
func writeAll(cmd *cobra.Command, force bool, files []file) error {
	if !force {
		for _, f := range files {
			if _, err := os.Stat(f.path); err == nil {
				return fmt.Errorf("%s already exists: use --force to overwrite it", f.path)
			}
		}
	}

	for _, f := range files {
		if err := writeNew(f.path, f.data, true); err != nil {
			return err
		}

		fmt.Fprintf(cmd.ErrOrStderr(), "Created %s\n", f.path)
	}

	return nil
}

// readKey parses a PEM private key of any type the crypto library writes (Ed25519, ECDSA, RSA).
func readKey(path string) (any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--key: %w", err)
	}

	key, err := (&x509.PEMEncodedCertificateAndKey{Key: b}).GetKey()
	if err != nil {
		return nil, fmt.Errorf("--key %s: %w", path, err)
	}

	return key, nil
}
