// Command machined is the multi-call node binary: machined (init), apid and trustd,
// selected by argv[0] or by the first argument.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/talos-go/talos/internal/multicall"
)

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]

	// The kernel runs the initramfs's /init as PID 1: the metal boot, before the node image.
	if os.Getpid() == 1 && os.Args[0] == "/init" {
		name = "metal-init"
	}

	// A subcommand wins over argv[0], so "machined trustd ..." runs trustd even though the
	// binary itself is named machined.
	if len(args) > 0 {
		if _, ok := multicall.Commands[args[0]]; ok {
			name, args = args[0], args[1:]
		}
	}

	if _, ok := multicall.Commands[name]; !ok {
		name = "machined"
	}

	if err := multicall.Commands[name](args); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}
