package machined

import (
	"testing"

	"github.com/talos-go/talos/internal/machined/system"
)

func TestServicesProblems(t *testing.T) {
	running := func(healthy, unknown bool) system.Info {
		return system.Info{State: system.StateRunning, Health: system.Health{Healthy: healthy, Unknown: unknown}}
	}

	for _, tc := range []struct {
		name     string
		states   map[string]system.Info
		required []string
		want     string
	}{
		{"all healthy", map[string]system.Info{"apid": running(true, false), "etcd": running(true, false)}, []string{"apid", "etcd"}, ""},
		{"health not known yet counts as met", map[string]system.Info{"apid": running(false, true)}, []string{"apid"}, ""},
		{"unhealthy", map[string]system.Info{"apid": running(true, false), "etcd": running(false, false)}, []string{"apid"}, "etcd not healthy"},
		{"failed and required", map[string]system.Info{"apid": running(true, false), "trustd": {State: system.StateFailed}},
			[]string{"apid", "trustd"}, "trustd failed, trustd not running"},
		{"required, never started", map[string]system.Info{"apid": running(true, false)}, []string{"apid", "etcd"}, "etcd not running"},
		{"a skipped service that is not required", map[string]system.Info{"apid": running(true, false), "containerd": {State: system.StateSkipped}},
			[]string{"apid"}, ""},
	} {
		if got := servicesProblems(tc.states, tc.required); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}
