package upgrade_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"testing"
)

func ed25519Key(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey, error) {
	t.Helper()

	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	return pub, priv, nil
}
