package configsupport_test

import (
	"encoding/json"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/talos-go/talos/internal/configsupport"
)

var update = flag.Bool("update", false, "rewrite docs/config-coverage.md")

const tablePath = "../../docs/config-coverage.md"

// Every field of every document kind has a rule, and every rule is one of the three answers
// with what that answer needs (a test, a reason and a fix, a reason).
func TestEveryFieldHasARule(t *testing.T) {
	for _, p := range configsupport.Fields() {
		if _, ok := configsupport.Lookup(p); !ok {
			t.Errorf("%s: no rule says whether the node honours, refuses or ignores it (add one to internal/configsupport/rules_*.go)", p)
		}
	}

	fields := configsupport.Fields()

	for _, r := range configsupport.Rules() {
		honoured, refused, ignored := r.Test != "", r.Refused != "", r.NoEffect != ""

		switch {
		case refused && r.Fix == "":
			t.Errorf("%s: a refusal needs its fix", r.Path)
		case ignored && (honoured || refused):
			t.Errorf("%s: no effect excludes honoured and refused", r.Path)
		case honoured && refused && len(r.On) == 0:
			t.Errorf("%s: honoured and refused everywhere at once", r.Path)
		case len(r.On) > 0 && (!honoured || !refused):
			t.Errorf("%s: a refusal on some nodes needs the test that proves the others", r.Path)
		case !honoured && !refused && !ignored:
			t.Errorf("%s: a rule must honour, refuse or ignore", r.Path)
		}

		if !slices.ContainsFunc(fields, func(f string) bool {
			return f == r.Path || strings.HasPrefix(f, r.Path+".") || strings.HasPrefix(f, r.Path+"[")
		}) {
			t.Errorf("%s: the rule names no field", r.Path)
		}
	}
}

// The documents listed are exactly the kinds machinery's schema knows.
func TestEveryDocumentKind(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/siderolabs/talos/pkg/machinery").Output()
	if err != nil {
		t.Fatalf("finding machinery's source: %v", err)
	}

	raw, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "config", "schemas", "config.schema.json"))
	if err != nil {
		t.Fatal(err)
	}

	var schema struct {
		OneOf []struct {
			Ref string `json:"$ref"`
		} `json:"oneOf"`
	}

	if err = json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}

	var want, got []string

	for _, o := range schema.OneOf {
		want = append(want, strings.TrimPrefix(o.Ref, "#/$defs/"))
	}

	for _, doc := range configsupport.Documents {
		typ := reflect.TypeOf(doc).Elem()
		got = append(got, filepath.Base(typ.PkgPath())+"."+typ.Name())
	}

	slices.Sort(want)
	slices.Sort(got)

	if len(want) < 15 || !slices.Equal(want, got) {
		t.Errorf("documents:\n got %v\nwant %v (machinery's schema)", got, want)
	}
}

// Every test a rule names exists.
func TestNamedTestsExist(t *testing.T) {
	tests := map[string]bool{}

	for _, r := range configsupport.Rules() {
		if r.Test != "" {
			tests[r.Test] = true
		}
	}

	dirs := map[string]map[string]bool{}

	for name := range tests {
		dir, fn, ok := strings.Cut(name, ".")
		if !ok || !strings.HasPrefix(fn, "Test") {
			t.Errorf("%q: name a test as <package dir>.TestName", name)

			continue
		}

		if dirs[dir] == nil {
			dirs[dir] = testFuncs(t, filepath.Join("../..", dir))
		}

		if !dirs[dir][fn] {
			t.Errorf("%s: no such test in %s", fn, dir)
		}
	}
}

func testFuncs(t *testing.T, dir string) map[string]bool {
	funcs := map[string]bool{}

	files, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
	for _, f := range files {
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}

		for _, d := range file.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil {
				funcs[fn.Name.Name] = true
			}
		}
	}

	return funcs
}

// docs/config-coverage.md is what the rules say.
func TestTableIsCurrent(t *testing.T) {
	table := configsupport.Table()

	if *update {
		if err := os.WriteFile(tablePath, []byte(table), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	got, err := os.ReadFile(tablePath)
	if err != nil {
		t.Fatalf("%v (write it with go test ./internal/configsupport -update)", err)
	}

	if string(got) != table {
		t.Errorf("%s is out of date: run go test ./internal/configsupport -update", tablePath)
	}
}
