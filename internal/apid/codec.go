package apid

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"

	// Register the proto codec used as a fallback.
	_ "google.golang.org/grpc/encoding/proto"
)

// frame is one gRPC message carried as its encoded bytes: the proxy never decodes what it
// forwards unless it has to (fan-out merge).
type frame struct {
	payload []byte
}

// rawCodec passes frames through untouched and encodes anything else as protobuf. It keeps the
// name "proto" so the wire content-type stays application/grpc+proto.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(*frame); ok {
		return mem.BufferSlice{mem.SliceBuffer(f.payload)}, nil
	}

	return encoding.GetCodecV2("proto").Marshal(v)
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if f, ok := v.(*frame); ok {
		f.payload = data.Materialize()

		return nil
	}

	return encoding.GetCodecV2("proto").Unmarshal(data, v)
}

func (rawCodec) Name() string { return "proto" }
