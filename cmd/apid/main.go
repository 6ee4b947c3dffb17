// Command apid is the node's API gateway on its own: the same program as the multi-call
// binary's "apid", built without the rest of the node, so the process loads and initializes
// only apid's packages (no Kubernetes client, no controllers). machined runs it when it sits
// next to machined's binary, and falls back to "machined apid" otherwise.
package main

import (
	"fmt"
	"os"

	"github.com/talos-go/talos/internal/apid"
)

func main() {
	if err := apid.Main(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "apid: %v\n", err)
		os.Exit(1)
	}
}
