package sequencer

import "context"

// Every sequence machined runs. A node boots with Boot; without a config it then runs
// Maintenance until one is applied; a metal node running from memory then runs Install and
// reboots from its disk; otherwise Start. It ends with Shutdown or Reboot. Upgrade and
// Reset run in the background of a running node (internal/machined/upgrade). To add a step,
// add a task here and its method to the interface the sequence names; a step of one mode or
// machine type is a phase added with AppendWhen.

// Machine is what the node's own sequences run (internal/machined's node).
type Machine interface {
	WriteRunFiles(ctx context.Context) error   // pid file and boot id
	StartResources(ctx context.Context) error  // resource state and controllers
	StartMachineAPI(ctx context.Context) error // the machine API on the node's socket
	LoadConfig(ctx context.Context) error      // staged, saved or --config; none: maintenance

	InstallToDisk(ctx context.Context) error // metal from memory: machine.install.disk becomes the node's

	EnterMaintenance(ctx context.Context) error // stage Maintenance; the boot counts as good
	ServeMaintenance(ctx context.Context) error // the insecure API, until a config or a power action
	WriteUserFiles(ctx context.Context) error   // machine.files and machine.env, before the services read them
	StartServices(ctx context.Context) error    // the service set of the machine type
	MarkRunning(ctx context.Context) error      // stage Running; the boot counts as good
	StopServices(ctx context.Context) error     // in reverse dependency order
}

// Boot brings up what every node has: resources, controllers, the machine API, the config.
func Boot(m Machine) Sequence {
	return New("boot").
		Append("initialize",
			T("writeRunFiles", m.WriteRunFiles),
			T("startResourceRuntime", m.StartResources),
			T("startMachineAPI", m.StartMachineAPI)).
		Append("config",
			T("loadConfig", m.LoadConfig))
}

// Maintenance serves the insecure maintenance API until a config is applied.
func Maintenance(m Machine) Sequence {
	return New("maintenance").
		Append("maintenance",
			T("enterMaintenance", m.EnterMaintenance),
			T("serveMaintenanceAPI", m.ServeMaintenance))
}

// Install makes the configured disk the node's; the node reboots from it next.
func Install(m Machine) Sequence {
	return New("install").
		Append("install",
			T("installToDisk", m.InstallToDisk))
}

// Start starts the services of a configured node.
func Start(m Machine) Sequence {
	return New("start").
		Append("userFiles",
			T("writeUserFiles", m.WriteUserFiles)).
		Append("services",
			T("startServices", m.StartServices)).
		Append("running",
			T("markRunning", m.MarkRunning))
}

// Shutdown stops the node.
func Shutdown(m Machine) Sequence {
	return New("shutdown").
		Append("stopServices",
			T("stopAllServices", m.StopServices))
}

// Reboot stops the node before it starts again.
func Reboot(m Machine) Sequence {
	return New("reboot").
		Append("stopServices",
			T("stopAllServices", m.StopServices))
}

// Upgrader is what the upgrade sequence runs (internal/machined/upgrade).
type Upgrader interface {
	LockEtcd(ctx context.Context) error       // the etcd upgrade lock, then etcd healthy without this node
	CordonAndDrain(ctx context.Context) error // (a node that runs no Kubernetes logs that it is skipped)
	WriteSlot(ctx context.Context) error      // the verified image into the inactive slot, verified again
	StageBootOnce(ctx context.Context) error  // boot-once for the next reboot, and whether to wipe
	LeaveEtcd(ctx context.Context) error      // recorded as rejoining, then leave
	StopServices(ctx context.Context) error
	WipeEphemeral(ctx context.Context) error
	SetBootOnce(ctx context.Context) error
	Reboot(ctx context.Context) error
}

// UpgradeOptions choose the phases of an upgrade.
type UpgradeOptions struct {
	ControlPlane bool // the node runs etcd
	Stage        bool // apply on the next reboot
	Preserve     bool // keep EPHEMERAL (and etcd membership)
}

// Upgrade installs an image into the inactive slot and reboots into it (or stages that).
func Upgrade(u Upgrader, o UpgradeOptions) Sequence {
	now := !o.Stage

	return New("upgrade").
		AppendWhen(o.ControlPlane, "etcd", T("lockEtcd", u.LockEtcd)).
		Append("drain", T("cordonAndDrain", u.CordonAndDrain)).
		Append("install", T("writeSlot", u.WriteSlot)).
		AppendWhen(o.Stage, "stage", T("stageBootOnce", u.StageBootOnce)).
		AppendWhen(now && o.ControlPlane && !o.Preserve, "leave", T("leaveEtcd", u.LeaveEtcd)).
		AppendWhen(now, "stopServices", T("stopAllServices", u.StopServices)).
		AppendWhen(now && !o.Preserve, "wipe", T("wipeEphemeral", u.WipeEphemeral)).
		AppendWhen(now, "reboot", T("setBootOnce", u.SetBootOnce), T("reboot", u.Reboot))
}

// Resetter is what the reset sequence runs (internal/machined/upgrade).
type Resetter interface {
	CordonAndDrain(ctx context.Context) error // (a node that runs no Kubernetes logs that it is skipped)
	LeaveEtcd(ctx context.Context) error      // when this node is an etcd member
	StopServices(ctx context.Context) error   // a failure is logged and the reset goes on
	Wipe(ctx context.Context) error           // the chosen system partitions; failures are reported with the power action
	Reboot(ctx context.Context) error
	Shutdown(ctx context.Context) error
}

// ResetOptions choose the phases of a reset.
type ResetOptions struct {
	Graceful     bool // leave the cluster first
	ControlPlane bool // the node may be an etcd member
	Reboot       bool // reboot afterwards rather than shut down
}

// Reset wipes the node's system partitions and reboots or shuts it down.
func Reset(r Resetter, o ResetOptions) Sequence {
	return New("reset").
		AppendWhen(o.Graceful, "drain", T("cordonAndDrain", r.CordonAndDrain)).
		AppendWhen(o.Graceful && o.ControlPlane, "leave", T("leaveEtcd", r.LeaveEtcd)).
		Append("stopServices", T("stopAllServices", r.StopServices)).
		Append("wipe", T("wipeSystemPartitions", r.Wipe)).
		AppendWhen(o.Reboot, "reboot", T("reboot", r.Reboot)).
		AppendWhen(!o.Reboot, "shutdown", T("shutdown", r.Shutdown))
}
