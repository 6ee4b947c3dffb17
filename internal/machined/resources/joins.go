package resources

import (
	"slices"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/resource/protobuf"
	"github.com/cosi-project/runtime/pkg/resource/typed"
	"github.com/siderolabs/talos/pkg/machinery/proto"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
)

// Our own resources for join by approval (docs/join-approval.md); upstream has none yet. They
// live in the cluster namespace beside Members.

// JoinRequestType lists the node keys that asked trustd to join without a token (control
// planes; id: the key's fingerprint).
const JoinRequestType = resource.Type("JoinRequests.cluster.talos-go.dev")

// JoinDecisionType is an admin's decision on a join request (id: the key's fingerprint): the
// one resource type the API may write (os:admin), by talosctl join approve|deny.
const JoinDecisionType = resource.Type("JoinDecisions.cluster.talos-go.dev")

// JoinStatusType is a node's own join by approval (id: local): whether its key waits, was
// denied or was signed.
const JoinStatusType = resource.Type("JoinStatuses.cluster.talos-go.dev")

// JoinStatusID is the one JoinStatus.
const JoinStatusID = resource.ID("local")

// JoinRequest is a node key asking to join.
type JoinRequest = typed.Resource[JoinRequestSpec, joinRequestExtension]

// JoinRequestSpec is what trustd recorded of the request.
type JoinRequestSpec struct {
	State     string    `yaml:"state" protobuf:"1"` // pending, approved or denied
	Addresses []string  `yaml:"addresses" protobuf:"2"`
	Names     []string  `yaml:"names" protobuf:"3"`
	FirstSeen time.Time `yaml:"firstSeen" protobuf:"4"`
	LastSeen  time.Time `yaml:"lastSeen" protobuf:"5"`
}

// DeepCopy implements typed.DeepCopyable.
func (s JoinRequestSpec) DeepCopy() JoinRequestSpec {
	s.Addresses = slices.Clone(s.Addresses)
	s.Names = slices.Clone(s.Names)

	return s
}

// NewJoinRequest is a JoinRequest for a key fingerprint.
func NewJoinRequest(id resource.ID) *JoinRequest {
	return typed.NewResource[JoinRequestSpec, joinRequestExtension](
		resource.NewMetadata(cluster.NamespaceName, JoinRequestType, id, resource.VersionUndefined), JoinRequestSpec{})
}

type joinRequestExtension struct{}

func (joinRequestExtension) ResourceDefinition() meta.ResourceDefinitionSpec {
	return meta.ResourceDefinitionSpec{
		Type:             JoinRequestType,
		Aliases:          []resource.Type{},
		DefaultNamespace: cluster.NamespaceName,
		PrintColumns: []meta.PrintColumn{
			{Name: "State", JSONPath: `{.state}`},
			{Name: "Addresses", JSONPath: `{.addresses}`},
			{Name: "Names", JSONPath: `{.names}`},
			{Name: "Last Seen", JSONPath: `{.lastSeen}`},
		},
	}
}

// JoinDecision is an admin's decision on a key.
type JoinDecision = typed.Resource[JoinDecisionSpec, joinDecisionExtension]

// JoinDecisionSpec holds the decision.
type JoinDecisionSpec struct {
	State string `yaml:"state" protobuf:"1"` // approved or denied
}

// DeepCopy implements typed.DeepCopyable.
func (s JoinDecisionSpec) DeepCopy() JoinDecisionSpec { return s }

// NewJoinDecision is a JoinDecision for a key fingerprint.
func NewJoinDecision(id resource.ID) *JoinDecision {
	return typed.NewResource[JoinDecisionSpec, joinDecisionExtension](
		resource.NewMetadata(cluster.NamespaceName, JoinDecisionType, id, resource.VersionUndefined), JoinDecisionSpec{})
}

type joinDecisionExtension struct{}

func (joinDecisionExtension) ResourceDefinition() meta.ResourceDefinitionSpec {
	return meta.ResourceDefinitionSpec{
		Type:             JoinDecisionType,
		Aliases:          []resource.Type{},
		DefaultNamespace: cluster.NamespaceName,
		PrintColumns:     []meta.PrintColumn{{Name: "State", JSONPath: `{.state}`}},
	}
}

// JoinStatus is this node's join by approval.
type JoinStatus = typed.Resource[JoinStatusSpec, joinStatusExtension]

// JoinStatusSpec is the state of this node's request.
type JoinStatusSpec struct {
	ID      string `yaml:"id" protobuf:"1"`      // the key's fingerprint, as the control planes list it
	State   string `yaml:"state" protobuf:"2"`   // waiting, denied or signed
	Message string `yaml:"message" protobuf:"3"` // the control plane's answer
}

// DeepCopy implements typed.DeepCopyable.
func (s JoinStatusSpec) DeepCopy() JoinStatusSpec { return s }

// NewJoinStatus is the node's JoinStatus.
func NewJoinStatus() *JoinStatus {
	return typed.NewResource[JoinStatusSpec, joinStatusExtension](
		resource.NewMetadata(cluster.NamespaceName, JoinStatusType, JoinStatusID, resource.VersionUndefined), JoinStatusSpec{})
}

type joinStatusExtension struct{}

func (joinStatusExtension) ResourceDefinition() meta.ResourceDefinitionSpec {
	return meta.ResourceDefinitionSpec{
		Type:             JoinStatusType,
		Aliases:          []resource.Type{},
		DefaultNamespace: cluster.NamespaceName,
		PrintColumns: []meta.PrintColumn{
			{Name: "Request", JSONPath: `{.id}`},
			{Name: "State", JSONPath: `{.state}`},
			{Name: "Message", JSONPath: `{.message}`},
		},
	}
}

func init() {
	// Served beside the machinery types (kept here, so state.go's list stays upstream's).
	Definitions = append(Definitions, &JoinRequest{}, &JoinDecision{}, &JoinStatus{})

	proto.RegisterDefaultTypes()

	for _, err := range []error{
		protobuf.RegisterDynamic[JoinRequestSpec](JoinRequestType, &JoinRequest{}),
		protobuf.RegisterDynamic[JoinDecisionSpec](JoinDecisionType, &JoinDecision{}),
		protobuf.RegisterDynamic[JoinStatusSpec](JoinStatusType, &JoinStatus{}),
	} {
		if err != nil {
			panic(err)
		}
	}
}
