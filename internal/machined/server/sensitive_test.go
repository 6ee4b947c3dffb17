package server

import (
	"context"
	"testing"

	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestCheckSensitive(t *testing.T) {
	withRoles := func(roles ...string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.MD{constants.APIAuthzRoleMetadataKey: roles})
	}

	for _, tc := range []struct {
		name    string
		ctx     context.Context
		ns, typ string
		code    codes.Code
	}{
		{"reader, os root", withRoles("os:reader"), secrets.NamespaceName, secrets.OSRootType, codes.PermissionDenied},
		{"operator, api certs", withRoles("os:operator"), secrets.NamespaceName, secrets.APIType, codes.PermissionDenied},
		{"reader, manifests (bootstrap token)", withRoles("os:reader"), k8s.ControlPlaneNamespaceName, k8s.ManifestType, codes.PermissionDenied},
		{"operator, machine config", withRoles("os:operator"), config.NamespaceName, config.MachineConfigType, codes.PermissionDenied},
		{"admin, os root", withRoles("os:admin"), secrets.NamespaceName, secrets.OSRootType, codes.OK},
		{"reader, hostname", withRoles("os:reader"), network.NamespaceName, network.HostnameStatusType, codes.OK},
		{"the node itself (no roles)", context.Background(), secrets.NamespaceName, secrets.OSRootType, codes.OK},
	} {
		err := readOnly(tc.ctx, state.Access{ResourceNamespace: tc.ns, ResourceType: tc.typ, Verb: state.Get})
		if status.Code(err) != tc.code {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.code)
		}
	}
}
