package apid

import (
	"sync"

	// Register the descriptors of every API apid serves.
	_ "github.com/cosi-project/runtime/api/v1alpha1"
	_ "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	_ "github.com/siderolabs/talos/pkg/machinery/api/inspect"
	_ "github.com/siderolabs/talos/pkg/machinery/api/machine"
	_ "github.com/siderolabs/talos/pkg/machinery/api/security"
	_ "github.com/siderolabs/talos/pkg/machinery/api/storage"
	_ "github.com/siderolabs/talos/pkg/machinery/api/time"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// methodInfo is what the proxy needs to know about a method.
type methodInfo struct {
	known         bool
	clientStreams bool
	serverStreams bool
	// fanOut: the reply has Talos's shape (unary: messages[].metadata; stream: metadata), so
	// replies from many nodes can be merged.
	fanOut bool
}

var methodCache sync.Map // full method name -> methodInfo

// lookupMethod describes "/pkg.Service/Method" from the registered descriptors.
func lookupMethod(fullMethod string) methodInfo {
	if v, ok := methodCache.Load(fullMethod); ok {
		return v.(methodInfo) //nolint:forcetypeassert // the map holds only methodInfo
	}

	info := describe(fullMethod)
	methodCache.Store(fullMethod, info)

	return info
}

func describe(fullMethod string) methodInfo {
	if len(fullMethod) < 2 || fullMethod[0] != '/' {
		return methodInfo{}
	}

	name := fullMethod[1:]
	slash := -1

	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '/' {
			slash = i

			break
		}
	}

	if slash < 0 {
		return methodInfo{}
	}

	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name[:slash]))
	if err != nil {
		return methodInfo{}
	}

	svc, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return methodInfo{}
	}

	m := svc.Methods().ByName(protoreflect.Name(name[slash+1:]))
	if m == nil {
		return methodInfo{}
	}

	info := methodInfo{known: true, clientStreams: m.IsStreamingClient(), serverStreams: m.IsStreamingServer()}

	out := m.Output()
	if info.serverStreams {
		info.fanOut = hasMetadataField(out)
	} else if f := out.Fields().ByNumber(1); f != nil && f.Cardinality() == protoreflect.Repeated && f.Message() != nil {
		info.fanOut = hasMetadataField(f.Message())
	}

	return info
}

func hasMetadataField(msg protoreflect.MessageDescriptor) bool {
	f := msg.Fields().ByNumber(1)

	return f != nil && f.Cardinality() != protoreflect.Repeated && f.Message() != nil &&
		f.Message().FullName() == "common.Metadata"
}
