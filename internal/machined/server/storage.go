package server

import (
	"context"

	"github.com/siderolabs/talos/pkg/machinery/api/storage"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Storage implements the StorageService. Wiping needs the node to own block devices (metal
// mode); until that lands both methods answer Unimplemented.
type Storage struct {
	storage.UnimplementedStorageServiceServer
}

// Disks answers Unimplemented.
func (Storage) Disks(context.Context, *emptypb.Empty) (*storage.DisksResponse, error) {
	return nil, status.Error(codes.Unimplemented, "Disks: listing block devices is not implemented on this node")
}

// BlockDeviceWipe answers Unimplemented.
func (Storage) BlockDeviceWipe(context.Context, *storage.BlockDeviceWipeRequest) (*storage.BlockDeviceWipeResponse, error) {
	return nil, status.Error(codes.Unimplemented, "BlockDeviceWipe: wiping block devices is not implemented on this node")
}
