package server

import (
	"context"
	"errors"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/talos-go/talos/internal/meta"
)

// errMetaKeyNotFound is a MetaDelete of a key that is not set.
var errMetaKeyNotFound = errors.New("META key not set")

// metaKey is where a Talos META key (a byte, as upstream's META partition numbers its tags)
// lives in our string-keyed store. Values are base64: they are bytes and may hold newlines.
func metaKey(key uint32) (string, error) {
	if key > 0xff {
		return "", status.Errorf(codes.InvalidArgument, "META key 0x%x is out of range: keys are 0x00-0xff", key)
	}

	return meta.TalosKey(uint8(key)), nil
}

// MetaWrite sets a key of the node's META store.
func (s *Machine) MetaWrite(ctx context.Context, req *machine.MetaWriteRequest) (*machine.MetaWriteResponse, error) {
	key, err := metaKey(req.GetKey())
	if err != nil {
		return nil, err
	}

	err = s.updateMeta(ctx, func(v meta.Values) error {
		v[key] = meta.TalosValue(req.GetValue())

		return nil
	})
	if err != nil {
		return nil, metaError(err)
	}

	return &machine.MetaWriteResponse{Messages: []*machine.MetaWrite{{Metadata: s.metadata(ctx)}}}, nil
}

// MetaDelete removes a key of the node's META store; a key that is not set is NotFound.
func (s *Machine) MetaDelete(ctx context.Context, req *machine.MetaDeleteRequest) (*machine.MetaDeleteResponse, error) {
	key, err := metaKey(req.GetKey())
	if err != nil {
		return nil, err
	}

	err = s.updateMeta(ctx, func(v meta.Values) error {
		if v[key] == "" {
			return errMetaKeyNotFound
		}

		delete(v, key)

		return nil
	})
	if err != nil {
		return nil, metaError(err)
	}

	return &machine.MetaDeleteResponse{Messages: []*machine.MetaDelete{{Metadata: s.metadata(ctx)}}}, nil
}

func (s *Machine) updateMeta(ctx context.Context, fn func(meta.Values) error) error {
	store, err := meta.Open(s.R.Paths.Meta())
	if err != nil {
		return err
	}

	if err = store.Update(fn); err != nil {
		return err
	}

	return SyncMetaKeys(ctx, s.R.State, s.R.Paths.Meta())
}

func metaError(err error) error {
	if errors.Is(err, errMetaKeyNotFound) {
		return status.Error(codes.NotFound, "the META key is not set: nothing to delete")
	}

	return status.Errorf(codes.Internal, "META: %v", err)
}
