package server

import (
	"context"
	"errors"

	"github.com/siderolabs/talos/pkg/machinery/api/storage"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talos-go/talos/internal/blockwipe"
)

// Storage implements the StorageService: wiping block devices the node does not use, on a
// metal node (process and container nodes share the host's devices, which are not theirs).
type Storage struct {
	storage.UnimplementedStorageServiceServer

	M *Machine
}

// Disks answers Unimplemented: upstream removed it for the Disk resources (`talosctl get disks`).
func (Storage) Disks(context.Context, *emptypb.Empty) (*storage.DisksResponse, error) {
	return nil, status.Error(codes.Unimplemented, "Disks: listing block devices is not implemented on this node: use `talosctl get disks`")
}

// BlockDeviceWipe wipes every device of the request, or none: each is checked (its name, that
// it exists, that nothing mounts, claims or is built on it) and opened before any is written.
func (s Storage) BlockDeviceWipe(ctx context.Context, req *storage.BlockDeviceWipeRequest) (*storage.BlockDeviceWipeResponse, error) {
	if s.M == nil || !s.M.R.Mode.OwnKernel() {
		return nil, status.Error(codes.Unimplemented, "BlockDeviceWipe: only a metal node wipes block devices (a process or container node shares the host's)")
	}

	if len(req.GetDevices()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "devices: name at least one device to wipe, such as sda or vda5")
	}

	devices := make([]blockwipe.Device, 0, len(req.GetDevices()))

	for _, d := range req.GetDevices() {
		m := blockwipe.Fast

		switch d.GetMethod() {
		case storage.BlockDeviceWipeDescriptor_FAST:
		case storage.BlockDeviceWipeDescriptor_ZEROES:
			m = blockwipe.Zeroes
		default:
			return nil, status.Errorf(codes.InvalidArgument, "%s: method %d: use FAST or ZEROES", d.GetDevice(), d.GetMethod())
		}

		devices = append(devices, blockwipe.Device{Name: d.GetDevice(), Method: m, SkipHolderCheck: d.GetSkipSecondaryCheck(), DropPartition: d.GetDropPartition()})
	}

	err := blockwipe.Wipe("/sys", "/dev", devices)

	switch {
	case err == nil:
		return &storage.BlockDeviceWipeResponse{Messages: []*storage.BlockDeviceWipe{{Metadata: s.M.metadata(ctx)}}}, nil
	case errors.Is(err, blockwipe.ErrName):
		return nil, status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, blockwipe.ErrNotFound):
		return nil, status.Error(codes.NotFound, err.Error())
	case errors.Is(err, blockwipe.ErrInUse):
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	default:
		return nil, status.Error(codes.Internal, err.Error())
	}
}
