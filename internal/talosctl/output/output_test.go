package output_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"

	"github.com/talos-go/talos/internal/machined/resources"
	"github.com/talos-go/talos/internal/talosctl/output"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

var testNow = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// formats are every -o value, with a template for the jsonpath ones.
var formats = map[string]string{
	"table":            "table",
	"yaml":             "yaml",
	"json":             "json",
	"jsonpath":         "jsonpath={.metadata.id}{\"\\t\"}{.spec.aliases[:]}{\"\\t\"}{.spec.printColumns[0]}",
	"jsonpath-as-json": "jsonpath-as-json={.spec.aliases}",
}

// TestGetRD renders `talosctl get rd` (resource definitions, whose ALIASES column is
// {.aliases[:]}) from two nodes in every output format.
func TestGetRD(t *testing.T) {
	rdOfRD := definition(t, &meta.ResourceDefinition{})

	var rds []resource.Resource
	for _, r := range []meta.ResourceWithRD{&network.HostnameStatus{}, &cluster.Member{}, &v1alpha1.Service{}} {
		rd := definition(t, r)
		rd.Metadata().SetVersion(resource.VersionUndefined.Next())
		rd.Metadata().SetCreated(testNow)
		rd.Metadata().SetUpdated(testNow)
		rds = append(rds, rd)
	}

	for name, format := range formats {
		var buf bytes.Buffer

		w, err := output.NewWriter(format, &buf)
		if err != nil {
			t.Fatal(err)
		}

		for _, node := range []string{"172.20.0.2", "172.20.0.3"} {
			if err = w.WriteHeader(rdOfRD, false); err != nil {
				t.Fatal(err)
			}

			for _, rd := range rds {
				if err = w.WriteResource(node, rd, state.Created); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			}
		}

		if err = w.Flush(); err != nil {
			t.Fatal(err)
		}

		golden(t, "get-rd."+name, buf.String())
	}
}

// TestEveryNodeDefinition renders every resource definition the node registers, and one
// resource of each type, as a table: each print column must evaluate.
func TestEveryNodeDefinition(t *testing.T) {
	ctx := context.Background()

	st, err := resources.NewState(ctx)
	if err != nil {
		t.Fatal(err)
	}

	list, err := st.List(ctx, resource.NewMetadata(meta.NamespaceName, meta.ResourceDefinitionType, "", resource.VersionUndefined))
	if err != nil {
		t.Fatal(err)
	}

	var buf bytes.Buffer

	w := output.NewTable(&buf)
	if err = w.WriteHeader(definition(t, &meta.ResourceDefinition{}), false); err != nil {
		t.Fatal(err)
	}

	for _, rd := range list.Items {
		if err = w.WriteResource("n1", rd, state.Created); err != nil {
			t.Fatal(err)
		}
	}

	if err = w.Flush(); err != nil {
		t.Fatal(err)
	}

	if lines := strings.Count(buf.String(), "\n"); lines != len(list.Items)+1 {
		t.Errorf("%d lines for %d definitions:\n%s", lines, len(list.Items), buf.String())
	}

	if !strings.Contains(buf.String(), "hostnamestatus") {
		t.Errorf("the HostnameStatus row lacks its alias:\n%s", buf.String())
	}

	for _, r := range resources.Definitions {
		rd := definition(t, r)
		tw := output.NewTable(&bytes.Buffer{})

		if err = tw.WriteHeader(rd, false); err != nil {
			t.Fatal(err)
		}

		res := r.(resource.Resource)

		// A DNSUpstream carries its connection, which machinery's YAML asks for its health:
		// the node never publishes one without it.
		if _, ok := res.(*network.DNSUpstream); ok {
			up := network.NewDNSUpstream("1.1.1.1:53")
			up.TypedSpec().Value.Conn = network.NewDNSConn(stillProxy{})
			res = up
		}

		if err = tw.WriteResource("n1", res, state.Created); err != nil {
			t.Errorf("%s: %v", rd.TypedSpec().Type, err)
		}
	}
}

// stillProxy is a DNS upstream connection that is never used: what a DNSUpstream row needs.
type stillProxy struct{}

func (stillProxy) Addr() string        { return "1.1.1.1:53" }
func (stillProxy) Fails() uint32       { return 0 }
func (stillProxy) Healthcheck()        {}
func (stillProxy) Close()              {}
func (stillProxy) Start(time.Duration) {}

func TestHostname(t *testing.T) {
	rd := definition(t, &network.HostnameStatus{})

	for name, nodes := range map[string][]string{"single": {"172.20.0.2"}, "multi": {"172.20.0.2", "172.20.0.3"}} {
		for _, format := range []string{"table", "yaml", "json"} {
			var buf bytes.Buffer

			w, err := output.NewWriter(format, &buf)
			if err != nil {
				t.Fatal(err)
			}

			for i, n := range nodes {
				if err = w.WriteHeader(rd, false); err != nil {
					t.Fatal(err)
				}

				if err = w.WriteResource(n, hostname("talos-"+string(rune('a'+i))), state.Created); err != nil {
					t.Fatal(err)
				}
			}

			if err = w.Flush(); err != nil {
				t.Fatal(err)
			}

			golden(t, "get-hostname-"+name+"."+format, buf.String())
		}
	}
}

func TestWatch(t *testing.T) {
	rd := definition(t, &network.HostnameStatus{})

	for _, format := range []string{"table", "jsonpath={.event} {.spec.hostname}"} {
		var buf bytes.Buffer

		w, err := output.NewWriter(format, &buf)
		if err != nil {
			t.Fatal(err)
		}

		if err = w.WriteHeader(rd, true); err != nil {
			t.Fatal(err)
		}

		for _, ev := range []state.EventType{state.Created, state.Updated, state.Destroyed} {
			if err = w.WriteResource("172.20.0.2", hostname("talos-a"), ev); err != nil {
				t.Fatal(err)
			}
		}

		if err = w.Flush(); err != nil {
			t.Fatal(err)
		}

		golden(t, "get-hostname-watch."+strings.SplitN(format, "=", 2)[0], buf.String())
	}
}

func TestNewWriterErrors(t *testing.T) {
	for format, want := range map[string]string{
		"xml":                "unknown output \"xml\"",
		"jsonpath":           "needs a template",
		"jsonpath-as-json=":  "needs a template",
		"jsonpath={.spec":    "parsing template",
		"table={.spec}":      "takes no template",
		"jsonpath={.a[:x]}":  "parsing template",
		"jsonpath-as-json=x": "", // a plain text template is valid
	} {
		_, err := output.NewWriter(format, &bytes.Buffer{})

		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", format, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: got %v, want an error with %q", format, err, want)
		}
	}
}

func hostname(name string) *network.HostnameStatus {
	r := network.NewHostnameStatus(network.NamespaceName, "hostname")
	r.TypedSpec().Hostname = name
	r.TypedSpec().Domainname = "example.org"
	r.Metadata().SetVersion(resource.VersionUndefined.Next())
	r.Metadata().SetCreated(testNow)
	r.Metadata().SetUpdated(testNow)

	return r
}

func definition(t *testing.T, r meta.ResourceWithRD) *meta.ResourceDefinition {
	t.Helper()

	rd, err := meta.NewResourceDefinition(r.ResourceDefinition())
	if err != nil {
		t.Fatal(err)
	}

	return rd
}

// golden compares got with testdata/<name>, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()

	path := filepath.Join("testdata", name)

	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}

		return
	}

	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (create it with go test -run %s -update): %v", t.Name(), err)
	}

	if got != string(want) {
		t.Errorf("output differs from %s (rewrite with -update if intended)\n--- got:\n%s\n--- want:\n%s", path, got, want)
	}
}
