package testenv

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"slices"
	"testing"
)

func TestSecretValues(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(key)
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	body := base64.StdEncoding.EncodeToString(der)

	config := fmt.Sprintf(`machine:
  token: abcdefghijklmnopqrstuv
  ca:
    crt: bm90IGEga2V5IGJ1dCBsb25nIGVub3VnaA==
    key: %s
cluster:
  token: abc123.0123456789abcdef
  secretboxEncryptionSecret: c2VjcmV0Ym94IHNlY3JldCBmb3IgdGVzdA==
  ca:
    key: ""
  clusterName: a-cluster-name-that-is-long
---
spec:
  privateKey: d2lyZWd1YXJkIHByaXZhdGUga2V5IGZvciB0ZXN0
`, base64.StdEncoding.EncodeToString(keyPEM))

	secrets := map[string]string{}
	if n := AddSecretValues(secrets, "cfg", []byte(config)); n != 12 {
		t.Errorf("added %d values, want 12: %v", n, secrets)
	}

	// A key file: the PEM as text.
	_, fileKey, _ := ed25519.GenerateKey(rand.Reader)
	der, _ = x509.MarshalPKCS8PrivateKey(fileKey)
	filePEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})

	if n := AddSecretValues(secrets, "apid.key", filePEM); n != 1 {
		t.Errorf("a key file added %d values, want 1", n)
	}

	// The same value from another source is one finding.
	AddSecretValues(secrets, "copy", []byte("machine:\n  token: abcdefghijklmnopqrstuv\n"))

	for _, tc := range []struct {
		text string
		want []string
	}{
		{"token-id: abc123\ntoken-secret: 0123456789abcdef\n", []string{"cfg .cluster.token (secret part)"}},
		{"data:\n  token-secret: " + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef")), []string{"cfg .cluster.token (secret part, base64)"}},
		{"log: key " + body + " leaked", []string{"cfg .machine.ca.key (PEM line 1)"}},
		{string(keyPEM), []string{"a PEM private key", "cfg .machine.ca.key (PEM line 1)"}},
		{"dump: " + base64.StdEncoding.EncodeToString(der), []string{"apid.key (PEM block 0) (PEM line 1)"}},
		{"token abcdefghijklmnopqrstuv", []string{"cfg .machine.token (and 1 other names)"}},
		{"wg: d2lyZWd1YXJkIHByaXZhdGUga2V5IGZvciB0ZXN0", []string{"cfg .spec.privateKey"}},
		{"cluster a-cluster-name-that-is-long, ca bm90IGEga2V5IGJ1dCBsb25nIGVub3VnaA==", nil},
	} {
		if got := FoundSecrets([]byte(tc.text), secrets); !slices.Equal(got, tc.want) {
			t.Errorf("FoundSecrets(%q) = %q, want %q", tc.text, got, tc.want)
		}
	}
}
