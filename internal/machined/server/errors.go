package server

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/talos-go/talos/internal/machined/errkind"
)

// kindCodes are the codes of machined's error kinds (config changes, upgrades, rollbacks,
// resets); etcd's sentinels have their own table in etcdError.
var kindCodes = map[errkind.Kind]codes.Code{
	errkind.Invalid:      codes.InvalidArgument,
	errkind.Precondition: codes.FailedPrecondition,
	errkind.NotFound:     codes.NotFound,
	errkind.Internal:     codes.Internal,
}

// apiError maps a domain error to its gRPC status, keeping its text. An error without a kind
// goes out as it is: grpc answers Unknown (Canceled or DeadlineExceeded for a context's end).
func apiError(err error) error {
	if err == nil {
		return nil
	}

	if k, ok := errkind.Of(err); ok {
		return status.Error(kindCodes[k], err.Error())
	}

	return err
}
