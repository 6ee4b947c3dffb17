// Package machined is the node's init: it boots the node, supervises services and serves the
// machine API.
package machined

import "errors"

// Main runs machined with its command-line arguments.
func Main(args []string) error {
	return errors.New("not yet")
}
