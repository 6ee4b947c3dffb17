// Command trustd is the node's certificate signer on its own: the same program as the
// multi-call binary's "trustd", built without the rest of the node so the process carries only
// trustd's packages. machined runs it when it sits next to machined's binary, and falls back to
// "machined trustd" otherwise.
package main

import (
	"fmt"
	"os"

	"github.com/talos-go/talos/internal/trustd"
)

func main() {
	if err := trustd.Main(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "trustd: %v\n", err)
		os.Exit(1)
	}
}
