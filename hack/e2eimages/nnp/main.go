// Command nnp prints its effective user ID, as the nonewprivs image's program does upstream:
// the image installs it setuid root, so it prints 0 unless the container forbids privilege
// escalation (no_new_privs), when the kernel ignores the setuid bit and it prints the
// container's own user.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Printf("Effective uid: %d\n", os.Geteuid())
}
