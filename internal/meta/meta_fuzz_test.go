package meta

import (
	"maps"
	"strings"
	"testing"
)

// FuzzParse: whatever bytes the META file holds, Parse either refuses them with a message
// that names the line, or returns values that the store writes back and reads again
// unchanged (so a damaged file can never turn into other values on the next write).
func FuzzParse(f *testing.F) {
	f.Add([]byte("boot.active=A\nboot.once=B\n"))
	f.Add([]byte("# comment\n\nupgrade.from=v1.0=x\n"))
	f.Add([]byte("=A\n"))
	f.Add([]byte("no-equals\n"))
	f.Add([]byte("k=v\r\nk2=\n"))
	f.Add([]byte("k=" + strings.Repeat("x", 70000) + "\n"))

	store, err := Open(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Parse(data)
		if err != nil {
			if v != nil {
				t.Fatalf("refused input also returned values %v", v)
			}

			if !strings.Contains(err.Error(), "META") {
				t.Fatalf("refusal %q does not say it is about META", err)
			}

			return
		}

		for k := range v {
			if k == "" || strings.ContainsAny(k, "=\n") {
				t.Fatalf("parsed an impossible key %q", k)
			}
		}

		if err = store.Update(func(cur Values) error {
			clear(cur)
			maps.Copy(cur, v)

			return nil
		}); err != nil {
			t.Fatalf("values read from a file could not be written back: %v", err)
		}

		back, err := store.Read()
		if err != nil {
			t.Fatalf("reading back what was written: %v", err)
		}

		maps.DeleteFunc(v, func(_, val string) bool { return val == "" }) // "" means unset
		if !maps.Equal(v, back) {
			t.Fatalf("round trip changed the values:\nparsed %q\nread   %q", v, back)
		}
	})
}
