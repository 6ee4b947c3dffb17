package apid

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Talos replies have one shape: a unary reply is `repeated Msg messages = 1` and each Msg starts
// with `common.Metadata metadata = 1`; a streamed message carries `common.Metadata metadata = 1`
// itself. common.Metadata is {string hostname = 1; string error = 2; google.rpc.Status
// status = 3}, google.rpc.Status is {int32 code = 1; string message = 2}. The proxy works on the
// encoded bytes: appending a metadata field merges into the existing one (protobuf merge rules:
// embedded messages merge, the last scalar wins), so existing metadata is kept and hostname is
// replaced.

// encodeMetadata encodes a common.Metadata.
func encodeMetadata(hostname, errText string, code int32) []byte {
	var b []byte

	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, hostname)

	if errText != "" {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, errText)

		var st []byte
		st = protowire.AppendTag(st, 1, protowire.VarintType)
		st = protowire.AppendVarint(st, uint64(int64(code)))
		st = protowire.AppendTag(st, 2, protowire.BytesType)
		st = protowire.AppendString(st, errText)

		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendBytes(b, st)
	}

	return b
}

// appendMetadata appends `metadata = 1` to an encoded message.
func appendMetadata(msg, md []byte) []byte {
	out := make([]byte, 0, len(msg)+len(md)+4)
	out = append(out, msg...)
	out = protowire.AppendTag(out, 1, protowire.BytesType)

	return protowire.AppendBytes(out, md)
}

// stampReply sets metadata.hostname on every entry of a unary reply's messages. A reply with no
// messages gets one carrying only the metadata, so every node shows in the merged reply.
func stampReply(reply []byte, hostname string) ([]byte, error) {
	md := encodeMetadata(hostname, "", 0)
	out := make([]byte, 0, len(reply)+32)
	found := false

	for b := reply; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("decoding reply: %w", protowire.ParseError(n))
		}

		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return nil, fmt.Errorf("decoding reply field %d: %w", num, protowire.ParseError(m))
		}

		if num == 1 && typ == protowire.BytesType {
			inner, _ := protowire.ConsumeBytes(b[n:])
			out = protowire.AppendTag(out, 1, protowire.BytesType)
			out = protowire.AppendBytes(out, appendMetadata(inner, md))
			found = true
		} else {
			out = append(out, b[:n+m]...)
		}

		b = b[n+m:]
	}

	if !found {
		out = protowire.AppendTag(out, 1, protowire.BytesType)
		out = protowire.AppendBytes(out, appendMetadata(nil, md))
	}

	return out, nil
}

// errorReply is a unary reply with one message carrying a node's failure.
func errorReply(hostname, errText string, code int32) []byte {
	var out []byte

	out = protowire.AppendTag(out, 1, protowire.BytesType)

	return protowire.AppendBytes(out, appendMetadata(nil, encodeMetadata(hostname, errText, code)))
}

// stampStreamMessage sets metadata.hostname on one streamed message.
func stampStreamMessage(msg []byte, hostname string) []byte {
	return appendMetadata(msg, encodeMetadata(hostname, "", 0))
}

// errorStreamMessage is a streamed message carrying a node's failure.
func errorStreamMessage(hostname, errText string, code int32) []byte {
	return appendMetadata(nil, encodeMetadata(hostname, errText, code))
}
