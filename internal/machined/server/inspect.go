package server

import (
	"context"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/siderolabs/talos/pkg/machinery/api/inspect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talos-go/talos/internal/machined/runtime"
)

// Inspect implements the InspectService: the controller runtime's dependency graph.
type Inspect struct {
	inspect.UnimplementedInspectServiceServer

	R *runtime.Runtime
}

var _ inspect.InspectServiceServer = (*Inspect)(nil)

// edgeTypes maps cosi's edge kinds onto the API's; a queue controller's primary input is a
// strong input and its mapped inputs are weak ones.
var edgeTypes = map[controller.DependencyEdgeType]inspect.DependencyEdgeType{
	controller.EdgeOutputExclusive:          inspect.DependencyEdgeType_OUTPUT_EXCLUSIVE,
	controller.EdgeOutputShared:             inspect.DependencyEdgeType_OUTPUT_SHARED,
	controller.EdgeInputStrong:              inspect.DependencyEdgeType_INPUT_STRONG,
	controller.EdgeInputWeak:                inspect.DependencyEdgeType_INPUT_WEAK,
	controller.EdgeInputDestroyReady:        inspect.DependencyEdgeType_INPUT_DESTROY_READY,
	controller.EdgeInputQPrimary:            inspect.DependencyEdgeType_INPUT_STRONG,
	controller.EdgeInputQMapped:             inspect.DependencyEdgeType_INPUT_WEAK,
	controller.EdgeInputQMappedDestroyReady: inspect.DependencyEdgeType_INPUT_DESTROY_READY,
}

// ControllerRuntimeDependencies lists every controller's inputs and outputs.
func (s *Inspect) ControllerRuntimeDependencies(ctx context.Context, _ *emptypb.Empty) (*inspect.ControllerRuntimeDependenciesResponse, error) {
	if s.R.Controllers == nil {
		return nil, status.Error(codes.Unavailable, "the controller runtime has not started yet: retry")
	}

	graph, err := s.R.Controllers.GetDependencyGraph()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "reading the controller dependency graph: %v", err)
	}

	msg := &inspect.ControllerRuntimeDependency{Metadata: (&Machine{R: s.R}).metadata(ctx)}

	for _, e := range graph.Edges {
		msg.Edges = append(msg.Edges, &inspect.ControllerDependencyEdge{
			ControllerName:    e.ControllerName,
			EdgeType:          edgeTypes[e.EdgeType],
			ResourceNamespace: e.ResourceNamespace,
			ResourceType:      e.ResourceType,
			ResourceId:        e.ResourceID,
		})
	}

	return &inspect.ControllerRuntimeDependenciesResponse{Messages: []*inspect.ControllerRuntimeDependency{msg}}, nil
}
