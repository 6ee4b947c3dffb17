// Package hostname checks the hostname a cloud's metadata service gives a node.
package hostname

import (
	"fmt"
	"strings"
)

// Check refuses a hostname the node cannot take: labels of letters, digits and hyphens, at most
// 63 characters each, 253 in all (RFC 1123). Empty is no hostname.
func Check(name string) error {
	if name == "" {
		return nil
	}

	if len(name) > 253 {
		return fmt.Errorf("%q is longer than 253 characters", name)
	}

	for label := range strings.SplitSeq(strings.TrimSuffix(name, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("%q is not a hostname: its label %q is empty, longer than 63 characters or begins or ends with a hyphen", name, label)
		}

		for _, r := range label {
			if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '-' {
				return fmt.Errorf("%q is not a hostname: %q is not a letter, digit or hyphen", name, r)
			}
		}
	}

	return nil
}
