package testenv

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// Packages' tests run side by side: two packages that start nodes or servers on the same
// 127.5.N.x addresses collide now and then. Each 127.5.N block belongs to one package's tests;
// 127.5.0 is the shared block for addresses that are only data (certificates, flags, configs),
// where nothing listens.
func TestEachPackageHasItsOwnAddressBlock(t *testing.T) {
	block := regexp.MustCompile(`127\\?\.5\\?\.(\d+)\\?\.`) // also as written in a regular expression
	owners := map[string]map[string]bool{}                  // block to the packages that use it

	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}

		if d.IsDir() && (d.Name() == "_out" || d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}

		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}

		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}

		for _, m := range block.FindAllStringSubmatch(string(b), -1) {
			if owners[m[1]] == nil {
				owners[m[1]] = map[string]bool{}
			}

			owners[m[1]][filepath.Dir(path)] = true
		}

		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	if len(owners) < 10 {
		t.Fatalf("found the tests' addresses in %d blocks only: is the walk in the module's root?", len(owners))
	}

	for n, pkgs := range owners {
		if n == "0" || len(pkgs) == 1 {
			continue
		}

		var names []string
		for p := range pkgs {
			names = append(names, strings.TrimPrefix(p, "../../"))
		}

		sort.Strings(names)
		t.Errorf("127.5.%s.x is used by the tests of %s: give each its own block (127.5.0.x for addresses nothing listens on)", n, strings.Join(names, ", "))
	}
}
