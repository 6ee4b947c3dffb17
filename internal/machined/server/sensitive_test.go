package server

import (
	"context"
	"testing"

	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/constants"
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
		name string
		ctx  context.Context
		typ  string
		code codes.Code
	}{
		{"reader, os root", withRoles("os:reader"), secrets.OSRootType, codes.PermissionDenied},
		{"operator, api certs", withRoles("os:operator"), secrets.APIType, codes.PermissionDenied},
		{"admin, os root", withRoles("os:admin"), secrets.OSRootType, codes.OK},
		{"reader, hostname", withRoles("os:reader"), network.HostnameStatusType, codes.OK},
		{"the node itself (no roles)", context.Background(), secrets.OSRootType, codes.OK},
	} {
		err := readOnly(tc.ctx, state.Access{ResourceNamespace: secrets.NamespaceName, ResourceType: tc.typ, Verb: state.Get})
		if status.Code(err) != tc.code {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.code)
		}
	}
}
