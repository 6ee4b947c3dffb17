package testenv

import (
	"flag"
	"fmt"
	"os"
)

// KeepOrder is called by the TestMain of a suite whose tests share one costly fixture and
// change it on purpose in a written order (reset a node, destroy the cluster last): it turns
// go test's -shuffle off for that package alone and says so, with why. Every other package
// runs shuffled (hack/test.sh).
func KeepOrder(suite, why string) {
	if !flag.Parsed() {
		flag.Parse() // m.Run would parse later and undo the Set below
	}

	if f := flag.Lookup("test.shuffle"); f != nil && f.Value.String() != "off" {
		fmt.Fprintf(os.Stderr, "%s runs in source order, not shuffled: %s\n", suite, why)

		if err := flag.Set("test.shuffle", "off"); err != nil {
			panic(err) // the flag exists: Lookup found it
		}
	}
}
