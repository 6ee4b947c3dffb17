package services_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/talos-go/talos/internal/machined/controllers/cri"
	"github.com/talos-go/talos/internal/machined/services"
	"github.com/talos-go/talos/internal/machined/testutil/ctrdtest"
)

// runcBaseSpec is base_runtime_spec of CRI's runc runtime in a containerd config ("": none).
func runcBaseSpec(t *testing.T, config string) string {
	t.Helper()

	var c struct {
		Plugins map[string]struct {
			Containerd struct {
				Runtimes map[string]map[string]any `toml:"runtimes"`
			} `toml:"containerd"`
		} `toml:"plugins"`
	}

	if err := toml.Unmarshal([]byte(config), &c); err != nil {
		t.Fatalf("containerd's config: %v\n%s", err, config)
	}

	s, _ := c.Plugins["io.containerd.cri.v1.runtime"].Containerd.Runtimes["runc"]["base_runtime_spec"].(string)

	return s
}

// The node's containerd config points CRI's runc runtime at the base runtime spec
// (machine.baseRuntimeSpecOverrides merged into containerd's default) only when there is one.
func TestContainerdConfigBaseRuntimeSpec(t *testing.T) {
	p := services.ContainerdPaths{Socket: "/run/c.sock", BaseRuntimeSpec: "/system/etc/cri/conf.d/base-spec.json"}
	if got := runcBaseSpec(t, services.ContainerdConfig(p)); got != p.BaseRuntimeSpec {
		t.Fatalf("runc's base_runtime_spec = %q, want %q", got, p.BaseRuntimeSpec)
	}

	p.BaseRuntimeSpec = ""
	if got := runcBaseSpec(t, services.ContainerdConfig(p)); got != "" {
		t.Fatalf("runc's base_runtime_spec = %q without overrides, want none", got)
	}
}

// A real containerd reads the base runtime spec when CRI starts: with the written spec CRI
// serves, with a spec it cannot read CRI does not start (so the key is the one it reads).
func TestContainerdLoadsTheBaseRuntimeSpec(t *testing.T) {
	criVersion := func(t *testing.T, socket string) error {
		conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()

		_, err = runtimeapi.NewRuntimeServiceClient(conn).Version(ctx, &runtimeapi.VersionRequest{})

		return err
	}

	t.Run("written", func(t *testing.T) {
		paths, _ := ctrdtest.StartContainerd(t, func(p *services.ContainerdPaths) {
			var err error
			if p.BaseRuntimeSpec, err = cri.WriteBaseRuntimeSpec(p.CRIParts, map[string]any{
				"process": map[string]any{"rlimits": []any{map[string]any{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}}},
			}); err != nil {
				t.Fatal(err)
			}
		})

		if err := criVersion(t, paths.Socket); err != nil {
			t.Fatalf("CRI with the written base spec: %v", err)
		}
	})

	t.Run("unreadable", func(t *testing.T) {
		paths, _ := ctrdtest.StartContainerd(t, func(p *services.ContainerdPaths) {
			p.BaseRuntimeSpec = filepath.Join(p.CRIParts, "missing.json")
		})

		// containerd runs on without its CRI plugin, which failed to load the spec.
		if err := criVersion(t, paths.Socket); status.Code(err) != codes.Unimplemented {
			t.Fatalf("CRI with a base runtime spec that does not exist: %v, want no CRI service (containerd did not read base_runtime_spec)", err)
		}
	})
}
