package server

import (
	"context"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/talos-go/talos/internal/machined/resources"
)

// sensitiveTypes are the resource types holding secret material (keys, the token).
var sensitiveTypes = func() map[resource.Type]bool {
	out := map[resource.Type]bool{}

	for _, d := range resources.Definitions {
		if spec := d.ResourceDefinition(); spec.Sensitivity == meta.Sensitive {
			out[spec.Type] = true
		}
	}

	return out
}()

// checkSensitive lets only os:admin read sensitive resources (secrets: CA key, token,
// certificate keys). Calls through apid carry the caller's roles in metadata; a call on the
// socket without them comes from the node itself.
func checkSensitive(ctx context.Context, access state.Access) error {
	if !sensitiveTypes[access.ResourceType] {
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
	if roles.Includes(role.Admin) {
		return nil
	}

	return status.Errorf(codes.PermissionDenied, "reading %s requires role %s", access.ResourceType, role.Admin)
}
