package testenv

import (
	"fmt"
	"os"
)

// InCI says the tests run in the project's CI (.ci/run sets CI=1), where every suite must run.
func InCI() bool {
	return os.Getenv("CI") != ""
}

// SkipSuite is what a TestMain returns when its whole suite cannot run here (reason says why
// and how to fix it): 0 outside CI, with a SKIP line; in CI 1, since a suite that skips there
// would look like a pass (`ok`) while testing nothing.
func SkipSuite(suite, reason string) int {
	if InCI() {
		fmt.Fprintf(os.Stderr, "FAIL %s: it cannot run here and CI=1 is set: %s\n", suite, reason)

		return 1
	}

	fmt.Fprintf(os.Stderr, "SKIP %s: %s\n", suite, reason)

	return 0
}
