package resources

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"

	"github.com/talos-go/talos/internal/configsupport"
)

// machineryTypes reads every resource type machinery defines from its source: each
// resource.Type("...") under pkg/machinery/resources, so a type upstream adds in a new version
// shows up here without a list to keep.
func machineryTypes(t *testing.T) map[resource.Type]bool {
	t.Helper()

	out, err := exec.CommandContext(t.Context(), "go", "list", "-m", "-f", "{{.Dir}}", "github.com/siderolabs/talos/pkg/machinery").Output()
	if err != nil {
		t.Fatalf("locating the machinery module: %v", err)
	}

	root := filepath.Join(strings.TrimSpace(string(out)), "resources")
	types := map[resource.Type]bool{}

	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}

		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}

		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 1 {
				return true
			}

			sel, ok := call.Fun.(*ast.SelectorExpr)
			lit, isLit := call.Args[0].(*ast.BasicLit)

			if ok && isLit && sel.Sel.Name == "Type" && lit.Kind == token.STRING {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "resource" {
					s, _ := strconv.Unquote(lit.Value)
					types[s] = true
				}
			}

			return true
		})

		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	if len(types) < 150 {
		t.Fatalf("found %d machinery resource types under %s: is the parse right?", len(types), root)
	}

	return types
}

// TestEveryMachineryTypeIsPublishedOrExplained: on each kind of node, every type machinery
// defines is registered, or is on NotPublished or onlyOn with the reason it is not.
func TestEveryMachineryTypeIsPublishedOrExplained(t *testing.T) {
	upstream := machineryTypes(t)

	served := map[resource.Type]bool{}
	for _, d := range Definitions {
		served[d.ResourceDefinition().Type] = true
	}

	for _, node := range []configsupport.Node{configsupport.Process, configsupport.Container, configsupport.Metal} {
		registered := map[resource.Type]bool{}
		ours := 0

		for _, d := range For(node) {
			typ := d.ResourceDefinition().Type
			registered[typ] = true

			if !upstream[typ] {
				ours++
			}
		}

		var missing []string

		for typ := range upstream {
			only, restricted := onlyOn[typ]

			switch {
			case registered[typ]:
			case NotPublished[typ] != "":
			case restricted && !slices.Contains(only.on, node) && only.why != "":
			default:
				missing = append(missing, typ)
			}
		}

		slices.Sort(missing)

		for _, typ := range missing {
			t.Errorf("%s nodes: machinery's %s is not registered and not explained: register it where a controller fills it, "+
				"or add it to NotPublished (or onlyOn) in published.go with the reason", node, typ)
		}

		t.Logf("%s nodes: %d of machinery's %d types registered (and %d of ours)", node, len(registered)-ours, len(upstream), ours)
	}

	// The tables hold no stale entry: an explained type is machinery's, and is not served where
	// it is said not to be.
	for typ, why := range NotPublished {
		if !upstream[typ] || served[typ] || why == "" {
			t.Errorf("NotPublished[%s]: want a machinery type that no node registers, with a reason (machinery's: %v, registered: %v)",
				typ, upstream[typ], served[typ])
		}
	}

	for typ, only := range onlyOn {
		if !served[typ] || len(only.on) == 0 || len(only.on) == 3 || only.why == "" {
			t.Errorf("onlyOn[%s]: want a type in Definitions, on some kinds of node but not all, with a reason", typ)
		}
	}
}

// TestNodeStateRegistersItsKindsTypes: a node's state answers for its kind's types only.
func TestNodeStateRegistersItsKindsTypes(t *testing.T) {
	for _, node := range []configsupport.Node{configsupport.Process, configsupport.Metal} {
		st, err := NewNodeState(t.Context(), node)
		if err != nil {
			t.Fatal(err)
		}

		rds, err := st.List(t.Context(), resource.NewMetadata(meta.NamespaceName, meta.ResourceDefinitionType, "", resource.VersionUndefined))
		if err != nil {
			t.Fatal(err)
		}

		got := map[string]bool{}
		for _, rd := range rds.Items {
			got[rd.Metadata().ID()] = true
		}

		for _, d := range Definitions {
			spec := d.ResourceDefinition()
			id := strings.ToLower(spec.Type)

			if want := slices.Contains(For(node), d); got[id] != want {
				t.Errorf("%s node: %s registered %v, want %v", node, spec.Type, got[id], want)
			}
		}
	}
}
