package server

import (
	"crypto/rand"
	"encoding/hex"
)

// newActorID names one API action, so its events can be followed (talosctl events --actor-id).
func newActorID() string {
	b := make([]byte, 16)
	rand.Read(b)

	return hex.EncodeToString(b)
}
