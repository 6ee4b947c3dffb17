// Package runtime holds what every part of machined shares: the node's platform and folders,
// the resource state, the event bus, the service supervisor and the current config.
package runtime

import "path/filepath"

// Paths are the node's folders. In the process mode they all live under the state folder, which
// stands for the node's disk; nothing outside it is written. With Root "/" (a node in its own
// root: the container provisioner, metal) the partitions are where upstream mounts them:
// STATE at /system/state, EPHEMERAL at /var, and META and BOOT beside STATE.
type Paths struct {
	Root string // the state folder
}

// mounted reports whether the partitions are mounted at upstream's places.
func (p Paths) mounted() bool { return p.Root == "/" }

func (p Paths) partition(label, mountPoint string) string {
	if p.mounted() {
		return mountPoint
	}

	return filepath.Join(p.Root, label)
}

// State is the STATE partition: machine config and node identity.
func (p Paths) State() string { return p.partition("STATE", "/system/state") }

// Config is the applied machine config.
func (p Paths) Config() string { return filepath.Join(p.State(), "config.yaml") }

// StagedConfig is a config applied in staged mode, taken on the next boot.
func (p Paths) StagedConfig() string { return filepath.Join(p.State(), "config.staged.yaml") }

// Ephemeral is the EPHEMERAL partition, mounted at /var.
func (p Paths) Ephemeral() string { return p.partition("EPHEMERAL", "/var") }

// Logs is where service logs are kept (/var/log).
func (p Paths) Logs() string { return filepath.Join(p.Ephemeral(), "log") }

// EtcdData is etcd's data folder (/var/lib/etcd).
func (p Paths) EtcdData() string { return filepath.Join(p.Ephemeral(), "lib", "etcd") }

// Boot is the BOOT partition with the A and B slots.
func (p Paths) Boot() string { return p.partition("BOOT", "/system/boot") }

// Meta is the META partition (small key-value store).
func (p Paths) Meta() string { return p.partition("META", "/system/meta") }

// System is the tmpfs /system.
func (p Paths) System() string { return filepath.Join(p.Root, "system") }

// MachinedSocket is the machine API socket (/system/run/machined/machined.sock).
func (p Paths) MachinedSocket() string {
	return filepath.Join(p.System(), "run", "machined", "machined.sock")
}

// Secrets is where machined writes each service's certificates (/system/secrets/<service>).
func (p Paths) Secrets(service string) string {
	return filepath.Join(p.System(), "secrets", service)
}

// PIDFile records the running machined's PID.
func (p Paths) PIDFile() string { return filepath.Join(p.System(), "run", "machined.pid") }

// BootIDFile is container mode's /proc/sys/kernel/random/boot_id: a new ID at every start of
// machined (a reboot), so clients can tell that a node came back even when it was never seen down.
func (p Paths) BootIDFile() string { return filepath.Join(p.System(), "run", "boot_id") }

// KubernetesConfig is kubelet's folder (/etc/kubernetes): its bootstrap kubeconfig and CA.
func (p Paths) KubernetesConfig() string { return filepath.Join(p.Root, "etc", "kubernetes") }

// KubernetesComponentConfig holds the control plane's config files (/system/config/kubernetes).
func (p Paths) KubernetesComponentConfig() string {
	return filepath.Join(p.System(), "config", "kubernetes")
}

// KubernetesAuditLogs is the API server's audit log folder (/var/log/audit/kube).
func (p Paths) KubernetesAuditLogs() string { return filepath.Join(p.Logs(), "audit", "kube") }
