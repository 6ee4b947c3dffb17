package configsupport_test

import (
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"

	"github.com/talos-go/talos/internal/configsupport"
)

// base is a minimal v1alpha1 document, machine: last: the cases add machine fields to it.
const base = `version: v1alpha1
cluster:
  controlPlane:
    endpoint: https://10.5.0.2:6443
machine:
  type: worker
  token: abcdef.0123456789abcdef
`

// A config setting a refused field or document is refused with the path the user wrote: the
// list item's index, the map key (dots and all), the document's kind and name.
func TestCheckNamesTheRefusedField(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		node       configsupport.Node
		want       []string
	}{
		{"kernel module", base + "  kernel:\n    modules:\n      - name: btrfs\n      - name: zfs\n", configsupport.Container,
			[]string{"machine.kernel.modules[0]: a process or container node runs on the host's kernel", "machine.kernel.modules[1]: ", "(on a container node)"}},
		{"sysfs", base + "  sysfs:\n    devices.system.cpu.cpu0.cpufreq.scaling_governor: performance\n", configsupport.Process,
			[]string{"machine.sysfs: a process or container node shares the host's kernel and /sys", "(on a process node)"}},
		{"watchdog document", base + "---\napiVersion: v1alpha1\nkind: WatchdogTimerConfig\ndevice: /dev/watchdog0\n", configsupport.Container,
			[]string{"WatchdogTimerConfig: a watchdog device belongs to the machine's own kernel", "(on a container node)"}},
		{"swap volume", base + "---\napiVersion: v1alpha1\nkind: SwapVolumeConfig\nname: swap1\nprovisioning:\n  diskSelector:\n    match: disk.transport == \"nvme\"\n  maxSize: 2GiB\n", configsupport.Container,
			[]string{"SwapVolumeConfig(swap1): swap volumes are partitions of the node's own disks", "(on a container node)"}},
		{"user volume", base + "---\napiVersion: v1alpha1\nkind: UserVolumeConfig\nname: data\nprovisioning:\n  diskSelector:\n    match: disk.transport == \"nvme\"\n  maxSize: 2GiB\n", configsupport.Process,
			[]string{"UserVolumeConfig(data): user volumes are partitions of the node's own disks", "(on a process node)"}},
		{"user volume grow", base + "---\napiVersion: v1alpha1\nkind: UserVolumeConfig\nname: data\nprovisioning:\n  diskSelector:\n    match: disk.transport == \"nvme\"\n  grow: true\n", configsupport.Metal,
			[]string{"UserVolumeConfig(data).provisioning.grow: this node sizes user, swap and raw volumes once"}},
		{"base runtime spec", base + "  baseRuntimeSpecOverrides:\n    process:\n      rlimits: []\n", configsupport.Process,
			[]string{"machine.baseRuntimeSpecOverrides: a process node runs no containerd", "(on a process node)"}},
		{"system volume disk", base + "---\napiVersion: v1alpha1\nkind: VolumeConfig\nname: EPHEMERAL\nprovisioning:\n  diskSelector:\n    match: disk.transport == \"nvme\"\n  maxSize: 40GiB\n", configsupport.Metal,
			[]string{"VolumeConfig(EPHEMERAL).provisioning.diskSelector: EPHEMERAL is made on the install disk"}},
		{"system volume size", base + "---\napiVersion: v1alpha1\nkind: VolumeConfig\nname: EPHEMERAL\nprovisioning:\n  maxSize: 40GiB\n", configsupport.Process,
			[]string{"VolumeConfig(EPHEMERAL).provisioning: EPHEMERAL is a folder", "(on a process node)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := configloader.NewFromBytes([]byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}

			err = configsupport.Check(cfg, tc.node)
			if err == nil {
				t.Fatal("accepted")
			}

			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the refusal does not say %q:\n%v", w, err)
				}
			}
		})
	}
}

// machine.baseRuntimeSpecOverrides passes where the node runs containerd.
func TestBaseRuntimeSpecOverridesPassWithContainerd(t *testing.T) {
	cfg, err := configloader.NewFromBytes([]byte(base + "  baseRuntimeSpecOverrides:\n    process:\n      rlimits: []\n"))
	if err != nil {
		t.Fatal(err)
	}

	for _, node := range []configsupport.Node{configsupport.Container, configsupport.Metal} {
		if err = configsupport.Check(cfg, node); err != nil {
			t.Errorf("%s node: %v", node, err)
		}
	}
}

// Fields set to their zero value, and honoured fields, pass.
func TestCheckPassesZeroAndHonouredFields(t *testing.T) {
	yaml := base + `  install:
    wipe: false
    disk: /dev/vda
  features:
    hostDNS:
      enabled: true
      resolveMemberNames: true
  sysctls:
    net.ipv4.ip_forward: "1"
  kernel:
    modules: []
---
apiVersion: v1alpha1
kind: VolumeConfig
name: STATE
encryption:
  provider: luks2
  keys:
    - slot: 0
      nodeID: {}
`

	cfg, err := configloader.NewFromBytes([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}

	for _, node := range []configsupport.Node{configsupport.Process, configsupport.Container, configsupport.Metal, ""} {
		if err = configsupport.Check(cfg, node); err != nil {
			t.Errorf("%s node: %v", node, err)
		}
	}
}
