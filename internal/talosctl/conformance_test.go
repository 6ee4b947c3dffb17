package talosctl

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/version"
)

func TestConformanceRuns(t *testing.T) {
	v := version.MustParseGeneric("v1.34.0")

	fast, err := conformanceRuns("fast", v)
	if err != nil || len(fast) != 2 || !fast[0].parallel || fast[0].skip != `\[Serial\]` || fast[1].parallel || fast[1].focus != `\[Serial\].*\[Conformance\]` {
		t.Errorf("fast: %+v %v", fast, err)
	}

	certified, err := conformanceRuns("certified", v)
	if err != nil || len(certified) != 1 || certified[0].parallel || certified[0].results != "v1.34/talos" {
		t.Errorf("certified: %+v %v", certified, err)
	}

	if _, err = conformanceRuns("quick", v); err == nil || !strings.Contains(err.Error(), "--mode fast or --mode certified") {
		t.Errorf("an unknown mode: %v", err)
	}
}
