package container

import (
	"strings"
	"testing"
)

func TestParseMount(t *testing.T) {
	dir := t.TempDir()

	for _, c := range []struct {
		in   string
		want Mount
	}{
		{"type=bind,source=" + dir + ",target=/var/mnt/data", Mount{Type: "bind", Source: dir, Target: "/var/mnt/data"}},
		{"src=" + dir + ",dst=/var/mnt/ro/,readonly", Mount{Type: "bind", Source: dir, Target: "/var/mnt/ro", ReadOnly: true}},
		{"type=tmpfs,destination=/var/scratch,ro=false", Mount{Type: "tmpfs", Target: "/var/scratch"}},
	} {
		got, err := ParseMount(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseMount(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}

	for _, c := range []struct{ in, says string }{
		{"type=volume,source=x,target=/var/x", "use bind or tmpfs"},
		{"type=bind,source=" + dir + ",target=var/x", "target must be an absolute path"},
		{"type=bind,source=rel,target=/var/x", "source must be an absolute path"},
		{"type=bind,source=" + dir + "/missing,target=/var/x", "no such file"},
		{"type=tmpfs,source=" + dir + ",target=/var/x", "a tmpfs has no source"},
		{"type=bind,source=" + dir + ",target=/var/x,volume-opt=1", `unknown field "volume-opt"`},
	} {
		if _, err := ParseMount(c.in); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("ParseMount(%q): %v, want an error saying %q", c.in, err, c.says)
		}
	}
}
