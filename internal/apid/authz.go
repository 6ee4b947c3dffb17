package apid

import (
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/talos-go/talos/internal/sensitive"
)

// Least role needed per method. Meanings follow Talos's documented roles:
//   - os:reader: read-only APIs that expose no secrets;
//   - os:operator: reader plus managing the node without secret access (reboot, service
//     control, etcd maintenance, etcd snapshots);
//   - os:etcd:backup: etcd snapshots only;
//   - os:admin: everything, including config, files, secrets and destructive operations.
//
// Any method missing from the table is denied to every role.
var rules = map[string]role.Role{
	// cluster, inspect, storage, time
	"/cluster.ClusterService/HealthCheck":                   role.Reader,
	"/inspect.InspectService/ControllerRuntimeDependencies": role.Reader,
	"/storage.StorageService/Disks":                         role.Reader,
	"/storage.StorageService/BlockDeviceWipe":               role.Admin,
	"/time.TimeService/Time":                                role.Reader,
	"/time.TimeService/TimeCheck":                           role.Reader,
	"/securityapi.SecurityService/Certificate":              role.Admin,

	// COSI state: reads are reader, except sensitive types, which need os:admin (package
	// sensitive: checked here before forwarding, and by machined); writes are admin.
	"/cosi.resource.State/Get":     role.Reader,
	"/cosi.resource.State/List":    role.Reader,
	"/cosi.resource.State/Watch":   role.Reader,
	"/cosi.resource.State/Create":  role.Admin,
	"/cosi.resource.State/Update":  role.Admin,
	"/cosi.resource.State/Destroy": role.Admin,

	// machine: reads
	"/machine.MachineService/Containers":         role.Reader,
	"/machine.MachineService/CPUFreqStats":       role.Reader,
	"/machine.MachineService/CPUInfo":            role.Reader,
	"/machine.MachineService/DiskStats":          role.Reader,
	"/machine.MachineService/DiskUsage":          role.Reader,
	"/machine.MachineService/Dmesg":              role.Reader,
	"/machine.MachineService/EtcdAlarmList":      role.Reader,
	"/machine.MachineService/EtcdMemberList":     role.Reader,
	"/machine.MachineService/EtcdStatus":         role.Reader,
	"/machine.MachineService/Events":             role.Reader,
	"/machine.MachineService/Hostname":           role.Reader,
	"/machine.MachineService/ImageList":          role.Reader,
	"/machine.MachineService/List":               role.Reader,
	"/machine.MachineService/LoadAvg":            role.Reader,
	"/machine.MachineService/Logs":               role.Reader,
	"/machine.MachineService/LogsContainers":     role.Reader,
	"/machine.MachineService/Memory":             role.Reader,
	"/machine.MachineService/Mounts":             role.Reader,
	"/machine.MachineService/Netstat":            role.Reader,
	"/machine.MachineService/NetworkDeviceStats": role.Reader,
	"/machine.MachineService/Processes":          role.Reader,
	"/machine.MachineService/ServiceList":        role.Reader,
	"/machine.MachineService/Stats":              role.Reader,
	"/machine.MachineService/SystemStat":         role.Reader,
	"/machine.MachineService/Version":            role.Reader,

	// machine: operations without secret access
	"/machine.MachineService/EtcdAlarmDisarm":       role.Operator,
	"/machine.MachineService/EtcdDefragment":        role.Operator,
	"/machine.MachineService/EtcdForfeitLeadership": role.Operator,
	"/machine.MachineService/EtcdSnapshot":          role.EtcdBackup,
	"/machine.MachineService/ImagePull":             role.Operator,
	"/machine.MachineService/Reboot":                role.Operator,
	"/machine.MachineService/Restart":               role.Operator,
	"/machine.MachineService/ServiceRestart":        role.Operator,
	"/machine.MachineService/ServiceStart":          role.Operator,
	"/machine.MachineService/ServiceStop":           role.Operator,
	"/machine.MachineService/Shutdown":              role.Operator,

	// machine: config, files, secrets, destructive operations
	"/machine.MachineService/ApplyConfiguration":          role.Admin,
	"/machine.MachineService/Bootstrap":                   role.Admin,
	"/machine.MachineService/Copy":                        role.Admin,
	"/machine.MachineService/EtcdDowngradeCancel":         role.Admin,
	"/machine.MachineService/EtcdDowngradeEnable":         role.Admin,
	"/machine.MachineService/EtcdDowngradeValidate":       role.Admin,
	"/machine.MachineService/EtcdLeaveCluster":            role.Admin,
	"/machine.MachineService/EtcdRecover":                 role.Admin,
	"/machine.MachineService/EtcdRemoveMemberByID":        role.Admin,
	"/machine.MachineService/GenerateClientConfiguration": role.Admin,
	"/machine.MachineService/GenerateConfiguration":       role.Admin,
	"/machine.MachineService/Kubeconfig":                  role.Admin,
	"/machine.MachineService/MetaDelete":                  role.Admin,
	"/machine.MachineService/MetaWrite":                   role.Admin,
	"/machine.MachineService/PacketCapture":               role.Admin,
	"/machine.MachineService/Read":                        role.Admin,
	"/machine.MachineService/Reset":                       role.Admin,
	"/machine.MachineService/Rollback":                    role.Admin,
	"/machine.MachineService/Upgrade":                     role.Admin,
}

// grants lists, for each least role, the roles that satisfy it.
var grants = map[role.Role]role.Set{
	role.Reader:     role.MakeSet(role.Admin, role.Operator, role.Reader),
	role.Operator:   role.MakeSet(role.Admin, role.Operator),
	role.EtcdBackup: role.MakeSet(role.Admin, role.Operator, role.EtcdBackup),
	role.Admin:      role.MakeSet(role.Admin),
}

// LeastRole returns the least role a method needs, and false for a method apid does not know.
func LeastRole(method string) (role.Role, bool) {
	r, ok := rules[method]

	return r, ok
}

// Authorize returns nil when roles may call method, and a PermissionDenied error naming the
// role needed otherwise.
func Authorize(method string, roles role.Set) error {
	least, ok := rules[method]
	if !ok {
		return status.Errorf(codes.PermissionDenied, "method %s is not allowed: it is not in the authorization table", method)
	}

	if roles.IncludesAny(grants[least]) {
		return nil
	}

	have := roles.Strings()
	if len(have) == 0 {
		have = []string{"none"}
	}

	return status.Errorf(codes.PermissionDenied, "method %s requires role %s (have %s)", method, least, strings.Join(have, ", "))
}

// Methods returns every method in the authorization table.
func Methods() []string {
	res := make([]string, 0, len(rules))
	for m := range rules {
		res = append(res, m)
	}

	return res
}

// cosiReads are the COSI methods whose request names a namespace and a type.
var cosiReads = map[string]bool{
	"/cosi.resource.State/Get":   true,
	"/cosi.resource.State/List":  true,
	"/cosi.resource.State/Watch": true,
}

// AuthorizeResource checks a COSI read of a resource type against roles, by the rule machined
// applies too (package sensitive).
func AuthorizeResource(namespace, typ string, roles role.Set) error {
	return sensitive.Authorize(namespace, typ, roles)
}
