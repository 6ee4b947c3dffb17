package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/talos-go/talos/internal/machined/errkind"
)

func TestAPIError(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code codes.Code
		msg  string
	}{
		{"invalid", errkind.New(errkind.Invalid, "image \"x\": give the absolute path"), codes.InvalidArgument, "image \"x\": give the absolute path"},
		{"precondition wrapping", errkind.Errorf(errkind.Precondition, "reset refused: %w", errors.New("quorum")), codes.FailedPrecondition, "reset refused: quorum"},
		{"not found", errkind.Errorf(errkind.NotFound, "upgrade refused: %w", os.ErrNotExist), codes.NotFound, "upgrade refused: file does not exist"},
		{"internal, wrapped again", fmt.Errorf("outer: %w", errkind.Wrap(errkind.Internal, errors.New("disk full"))), codes.Internal, "outer: disk full"},
		{"no kind", errors.New("plain"), codes.Unknown, "plain"},
		{"already a status", status.Error(codes.Aborted, "aborted"), codes.Aborted, "aborted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := status.Convert(apiError(tc.err))
			if st.Code() != tc.code || st.Message() != tc.msg {
				t.Fatalf("got %v %q, want %v %q", st.Code(), st.Message(), tc.code, tc.msg)
			}
		})
	}

	if apiError(nil) != nil {
		t.Fatal("nil error mapped to a status")
	}

	// The cause stays reachable through the kind.
	if err := errkind.Errorf(errkind.Invalid, "ctx: %w", context.Canceled); !errors.Is(err, context.Canceled) {
		t.Fatal("errors.Is lost the cause")
	}
}
