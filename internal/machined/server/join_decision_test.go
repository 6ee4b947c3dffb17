package server

import (
	"context"
	"testing"

	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/talos-go/talos/internal/machined/resources"
)

// TestWritesOnlyJoinDecisionsByAdmin: through the API, the one resource type that may be
// written is a JoinDecision (talosctl join approve|deny), and only by os:admin; every other type
// stays read-only for every role.
func TestWritesOnlyJoinDecisionsByAdmin(t *testing.T) {
	as := func(roles ...string) context.Context {
		md := metadata.MD{}
		for _, r := range roles {
			md.Append(constants.APIAuthzRoleMetadataKey, r)
		}

		return metadata.NewIncomingContext(context.Background(), md)
	}

	decision := state.Access{ResourceNamespace: cluster.NamespaceName, ResourceType: resources.JoinDecisionType}
	hostname := state.Access{ResourceNamespace: network.NamespaceName, ResourceType: network.HostnameSpecType}

	for _, verb := range []state.Verb{state.Create, state.Update} {
		decision.Verb, hostname.Verb = verb, verb

		if err := readOnly(as("os:admin"), decision); err != nil {
			t.Errorf("admin %v JoinDecision: %v", verb, err)
		}

		for _, r := range []string{"os:reader", "os:operator", "os:etcd:backup"} {
			if err := readOnly(as(r), decision); status.Code(err) != codes.PermissionDenied {
				t.Errorf("%s %v JoinDecision: %v, want PermissionDenied", r, verb, err)
			}
		}

		if err := readOnly(as("os:admin"), hostname); status.Code(err) != codes.PermissionDenied {
			t.Errorf("admin %v HostnameSpec: %v, want read-only", verb, err)
		}
	}
}
