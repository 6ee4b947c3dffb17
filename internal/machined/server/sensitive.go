package server

import (
	"context"

	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/metadata"

	"github.com/talos-go/talos/internal/sensitive"
)

// checkSensitive lets only os:admin read sensitive resources, by the rule apid applies too
// (package sensitive). Calls through apid carry the caller's roles in metadata; a call on the
// socket without them comes from the node itself.
func checkSensitive(ctx context.Context, access state.Access) error {
	if !sensitive.Resource(access.ResourceNamespace, access.ResourceType) {
		return nil
	}

	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return nil
	}

	asserted := md.Get(constants.APIAuthzRoleMetadataKey)
	if len(asserted) == 0 {
		return nil
	}

	roles, _ := role.Parse(asserted)

	return sensitive.Authorize(access.ResourceNamespace, access.ResourceType, roles)
}
