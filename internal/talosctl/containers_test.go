package talosctl

import (
	"bytes"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
)

func TestRenderContainers(t *testing.T) {
	resp := &machineapi.ContainersResponse{Messages: []*machineapi.Container{
		{Metadata: &common.Metadata{Hostname: "cp-1"}, Containers: []*machineapi.ContainerInfo{
			{Namespace: "system", Id: "etcd", Image: "registry.local/etcd:v3.6.13", Pid: 42, Status: "RUNNING"},
		}},
		{Containers: []*machineapi.ContainerInfo{{Namespace: "system", Id: "kubelet", Image: "registry.local/kubelet:v1.34.0", Status: "STOPPED"}}},
	}}

	var out bytes.Buffer
	if err := renderContainers(&out, resp, "10.5.0.3"); err != nil {
		t.Fatal(err)
	}

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "NODE NAMESPACE ID IMAGE PID STATUS" {
		t.Fatalf("table:\n%s", out.String())
	}

	if got := strings.Join(strings.Fields(lines[1]), " "); got != "cp-1 system etcd registry.local/etcd:v3.6.13 42 RUNNING" {
		t.Errorf("row %q", got)
	}

	if got := strings.Join(strings.Fields(lines[2]), " "); got != "10.5.0.3 system kubelet registry.local/kubelet:v1.34.0 0 STOPPED" {
		t.Errorf("row without a hostname %q", got)
	}
}
