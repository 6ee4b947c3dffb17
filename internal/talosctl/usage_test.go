package talosctl

import (
	"bytes"
	"strings"
	"testing"
)

// TestUsageErrorsSayWhatToDo: a wrong command line names the command's help; an error of the
// work itself does not.
func TestUsageErrorsSayWhatToDo(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"service", "a", "b", "c"}, "see `talosctl service --help`"},
		{[]string{"etcd", "members", "--bogus"}, "see `talosctl etcd members --help`"},
		{[]string{"no-such-command"}, "see `talosctl --help`"},
	} {
		var stdout, stderr bytes.Buffer

		if code := Execute(tc.args, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("talosctl %v: exit %d, stderr %q, want %q", tc.args, code, stderr.String(), tc.want)
		}
	}

	var stdout, stderr bytes.Buffer

	if code := Execute([]string{"validate", "--config", t.TempDir() + "/missing.yaml", "--mode", "container"}, &stdout, &stderr); code != 1 || strings.Contains(stderr.String(), "--help") {
		t.Errorf("a work error must not point at --help: exit %d, %q", code, stderr.String())
	}
}

func TestCompletion(t *testing.T) {
	for shell, want := range map[string]string{"bash": "__start_talosctl", "zsh": "#compdef talosctl", "fish": "complete -c talosctl"} {
		var stdout, stderr bytes.Buffer

		if code := Execute([]string{"completion", shell}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), want) {
			t.Errorf("completion %s: exit %d, %q not in the script (%s)", shell, code, want, stderr.String())
		}
	}
}
