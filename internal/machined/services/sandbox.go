package services

import (
	"github.com/talos-go/talos/internal/sandbox"
)

// confined is the filesystem a service process of ours may reach: its own folder (read only),
// the program's binary, and the system's libraries and kernel views. The machine config, the other
// services' keys and EPHEMERAL stay out of its reach. (machined's socket is reached by connect,
// which Landlock's filesystem rules do not govern.)
func confined(ownDir, binary string) *sandbox.Policy {
	p := sandbox.System.Merge(sandbox.Policy{ReadOnly: []string{ownDir}, Exec: []string{binary}})

	return &p
}
