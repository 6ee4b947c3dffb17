package apid

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	cosiapi "github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	cosiserver "github.com/cosi-project/runtime/pkg/state/protobuf/server"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// applyRecorder is a MachineService whose ApplyConfiguration records the role it was called with.
type applyRecorder struct {
	fakeMachined
}

func (a *applyRecorder) ApplyConfiguration(ctx context.Context, _ *machine.ApplyConfigurationRequest) (*machine.ApplyConfigurationResponse, error) {
	a.record(ctx)

	return &machine.ApplyConfigurationResponse{Messages: []*machine.ApplyConfiguration{{ModeDetails: "applied"}}}, nil
}

func TestMaintenanceAPI(t *testing.T) {
	dir, err := os.MkdirTemp("", "apidm")
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { os.RemoveAll(dir) })

	sock := filepath.Join(dir, "m.sock")

	ml, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}

	m := &applyRecorder{fakeMachined: fakeMachined{name: "maint"}}
	gs := grpc.NewServer()
	machine.RegisterMachineServiceServer(gs, m)
	cosiapi.RegisterStateServer(gs, cosiserver.NewState(state.WrapCore(namespaced.NewState(inmem.Build))))

	gsDone := make(chan struct{})

	go func() {
		defer close(gsDone)

		gs.Serve(ml)
	}()

	t.Cleanup(func() { gs.Stop(); <-gsDone })

	l := listenNode(t)
	addr := l.Addr().String()
	l.Close()

	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)

	go func() { served <- ServeMaintenance(ctx, MaintenanceOptions{Listen: addr, MachinedSocket: sock}) }()

	t.Cleanup(func() {
		cancel()
		<-served
	})

	// No client certificate: the maintenance API is server-authenticated only.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	mc := machine.NewMachineServiceClient(conn)

	var v *machine.VersionResponse

	for range 50 {
		cctx, ccancel := context.WithTimeout(t.Context(), time.Second)
		v, err = mc.Version(cctx, &emptypb.Empty{}, grpc.WaitForReady(true))

		ccancel()

		if err == nil {
			break
		}
	}

	if err != nil || v.Messages[0].GetVersion().GetArch() != "maint" {
		t.Fatalf("maintenance Version: %v %v", v, err)
	}

	if _, err = mc.Reboot(t.Context(), &machine.RebootRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("Reboot in maintenance: %v", err)
	}

	sc := cosiapi.NewStateClient(conn)

	for ns, want := range map[string]codes.Code{"hardware": codes.OK, "network": codes.OK, "secrets": codes.PermissionDenied, "config": codes.PermissionDenied} {
		s, err := sc.List(t.Context(), &cosiapi.ListRequest{Namespace: ns, Type: "Any.talos.dev"})
		if err == nil {
			for {
				if _, err = s.Recv(); err != nil {
					break
				}
			}

			if errors.Is(err, io.EOF) {
				err = nil
			}
		}

		if status.Code(err) != want {
			t.Errorf("List %s: want %v, got %v", ns, want, err)
		}
	}

	ar, err := mc.ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: []byte("x")})
	if err != nil || ar.Messages[0].GetModeDetails() != "applied" {
		t.Fatalf("apply: %v %v", ar, err)
	}

	if got := m.lastRoles(); len(got) != 1 || got[0] != "os:admin" {
		t.Errorf("apply forwarded with roles %v", got)
	}

	// After the config is applied machined stops the maintenance API and the port is free.
	cancel()

	if err = <-served; err != nil {
		t.Errorf("maintenance stop: %v", err)
	}

	served <- nil // for the cleanup

	l2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("port not released: %v", err)
	}

	l2.Close()
}
