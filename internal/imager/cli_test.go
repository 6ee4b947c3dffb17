package imager

import (
	"strings"
	"testing"
)

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want Options // Command "" for a refusal
		err  string
	}{
		{[]string{"keygen"}, Options{Command: "keygen", Out: "."}, ""},
		{[]string{"build", "--key", "k", "--version", "v1", "--machined", "m", "--etcd", "e", "--out", "o", "--gzip=false"},
			Options{Command: "build", Key: "k", Version: "v1", Machined: "m", Etcd: "e", Out: "o"}, ""},
		{[]string{"build", "--key", "k"}, Options{}, "build needs --key, --version"},
		{[]string{"verify", "--pub", "p", "img"}, Options{Command: "verify", Pub: "p", Image: "img"}, ""},
		{[]string{"verify", "img"}, Options{}, "verify needs --pub"},
		{[]string{"pubkey", "k.pub"}, Options{Command: "pubkey", Pub: "k.pub"}, ""},
		{[]string{"pubkey"}, Options{}, "usage: imager pubkey"},
		{[]string{"frobnicate"}, Options{}, "usage: imager keygen"},
		{nil, Options{}, "usage: imager keygen"},
	} {
		got, err := parseArgs(tc.args)

		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: error %v, want one saying %q", tc.args, err, tc.err)
			}

			continue
		}

		if err != nil || got != tc.want {
			t.Errorf("%v: got %+v, %v; want %+v", tc.args, got, err, tc.want)
		}
	}
}
