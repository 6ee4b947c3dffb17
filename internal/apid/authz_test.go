package apid

import (
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestAuthorize is the role table, least role by least role (TestRoleMatrix does the same
// through a running apid).
func TestAuthorize(t *testing.T) {
	methods := map[role.Role]string{
		role.Reader:     mVersion,
		role.Operator:   mReboot,
		role.EtcdBackup: "/machine.MachineService/EtcdSnapshot",
		role.Admin:      "/machine.MachineService/Reset",
	}

	for _, tc := range []struct {
		roles   role.Set
		allowed []role.Role // least roles the set satisfies
	}{
		{role.MakeSet(role.Admin), []role.Role{role.Reader, role.Operator, role.EtcdBackup, role.Admin}},
		{role.MakeSet(role.Operator), []role.Role{role.Reader, role.Operator, role.EtcdBackup}},
		{role.MakeSet(role.Reader), []role.Role{role.Reader}},
		{role.MakeSet(role.EtcdBackup), []role.Role{role.EtcdBackup}},
		{role.MakeSet(role.Reader, role.EtcdBackup), []role.Role{role.Reader, role.EtcdBackup}},
		{role.MakeSet(role.Impersonator), nil},
		{role.Zero, nil},
	} {
		for least, method := range methods {
			err := Authorize(method, tc.roles)

			want := false
			for _, r := range tc.allowed {
				want = want || r == least
			}

			if want {
				if err != nil {
					t.Errorf("%v %s: want allowed, got %v", tc.roles.Strings(), method, err)
				}

				continue
			}

			if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), "requires role "+string(least)) {
				t.Errorf("%v %s: want PermissionDenied naming %s, got %v", tc.roles.Strings(), method, least, err)
			}
		}
	}
}

func TestAuthorizeResource(t *testing.T) {
	for _, tc := range []struct {
		namespace, typ string
		roles          role.Set
		allowed        bool
	}{
		{"network", "LinkStatuses.net.talos.dev", role.MakeSet(role.Reader), true},
		{"secrets", "OSRootSecrets.secrets.talos.dev", role.MakeSet(role.Reader), false},
		{"secrets", "OSRootSecrets.secrets.talos.dev", role.MakeSet(role.Operator), false},
		{"secrets", "OSRootSecrets.secrets.talos.dev", role.MakeSet(role.Admin), true},
		{"config", "MachineConfigs.config.talos.dev", role.MakeSet(role.Operator), false},
		{"config", "MachineConfigs.config.talos.dev", role.MakeSet(role.Admin), true},
		{"config", "MachineTypes.config.talos.dev", role.MakeSet(role.Reader), true},
	} {
		err := AuthorizeResource(tc.namespace, tc.typ, tc.roles)

		switch {
		case tc.allowed && err != nil:
			t.Errorf("%s/%s %v: want allowed, got %v", tc.namespace, tc.typ, tc.roles.Strings(), err)
		case !tc.allowed && (status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "requires role os:admin")):
			t.Errorf("%s/%s %v: want PermissionDenied naming os:admin, got %v", tc.namespace, tc.typ, tc.roles.Strings(), err)
		}
	}
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		err   string
		local []string
	}{
		{args: []string{"--listen", "127.5.0.2:50000", "--certs", "/c", "--socket", "/s", "--local-address", "a, b", "--local-address", "c"}, local: []string{"a", "b", "c"}},
		{args: []string{"--listen", "127.5.0.2:50000", "--certs", "/c"}, err: "--listen, --certs and --socket are required"},
		{args: []string{"--nope"}, err: "flag provided but not defined: -nope"},
	} {
		opts, err := parseFlags(tc.args)

		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: want error %q, got %v", tc.args, tc.err, err)
			}

			continue
		}

		if err != nil || strings.Join(opts.LocalAddresses, " ") != strings.Join(tc.local, " ") || opts.RemotePort != 50000 || opts.MachinedSocket != "/s" {
			t.Errorf("%v: got %+v %v", tc.args, opts, err)
		}
	}
}
