package services

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/talos-go/talos/internal/machined/runtime"
)

// A node image with apid's own binary next to machined's runs it; without one (process nodes
// built from the multi-call binary alone) apid runs as "machined apid". A file that is not
// executable is not taken for the program.
func TestProgramPrefersItsOwnBinary(t *testing.T) {
	dir := t.TempDir()
	r := &runtime.Runtime{Binary: filepath.Join(dir, "machined")}

	if got, want := program(r, "apid"), []string{r.Binary, "apid"}; !slices.Equal(got, want) {
		t.Fatalf("without apid's binary: %q, want %q", got, want)
	}

	own := filepath.Join(dir, "apid")
	if err := os.WriteFile(own, []byte("#!/bin/true\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	if got, want := program(r, "apid"), []string{r.Binary, "apid"}; !slices.Equal(got, want) {
		t.Fatalf("with a non-executable apid file: %q, want %q", got, want)
	}

	if err := os.Chmod(own, 0o755); err != nil {
		t.Fatal(err)
	}

	if got, want := program(r, "apid"), []string{own}; !slices.Equal(got, want) {
		t.Fatalf("with apid's binary: %q, want %q", got, want)
	}

	if got, want := program(r, "trustd"), []string{r.Binary, "trustd"}; !slices.Equal(got, want) {
		t.Fatalf("trustd without its binary: %q, want %q", got, want)
	}
}
