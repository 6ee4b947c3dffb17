package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	configres "github.com/siderolabs/talos/pkg/machinery/resources/config"
	"go.uber.org/zap"

	"github.com/talos-go/talos/internal/configsupport"
	"github.com/talos-go/talos/internal/etcd"
	"github.com/talos-go/talos/internal/machined/events"
	"github.com/talos-go/talos/internal/machined/system"
	"github.com/talos-go/talos/internal/machined/system/logging"
	"github.com/talos-go/talos/internal/machined/trustbundle"
)

// Runtime is shared by every part of one machined.
type Runtime struct {
	Mode Mode // the kind of node and what it has of its own, decided at start
	// PlatformName is the platform a metal node booted on (talos.platform=: metal, nocloud,
	// openstack, aws, gcp, azure);
	// empty: Platform's.
	PlatformName string
	Address      string // the node's address (container mode: its loopback address)
	Paths        Paths
	Binary       string // path of the multi-call binary, for starting apid and trustd
	// CertLifetime is the lifetime of the certificates the node issues itself and its trustd
	// signs (machined's hidden --cert-lifetime, for tests that watch rotation); zero: a day.
	CertLifetime time.Duration
	// Etcd is the node's etcd member (control planes run it): the etcd service, the API
	// (Bootstrap, Etcd*), health, reset and upgrade share it. The node sets it at start.
	Etcd *etcd.Manager

	State state.State
	// Controllers gives the controller runtime's dependency graph (the inspect API).
	Controllers interface {
		GetDependencyGraph() (*controller.DependencyGraph, error)
	}
	Events     *events.Bus
	Logs       *logging.Manager
	Supervisor *system.Supervisor
	Log        *zap.Logger

	mu  sync.RWMutex
	cfg config.Provider
}

// Config returns the active config, or nil in maintenance mode.
func (r *Runtime) Config() config.Provider {
	r.mu.RLock()
	defer r.mu.RUnlock()

	return r.cfg
}

// SetConfig makes cfg the active config.
func (r *Runtime) SetConfig(cfg config.Provider) {
	r.mu.Lock()
	defer r.mu.Unlock()

	r.cfg = cfg
}

// MachineType is the node's machine type as the MachineType resource says: TypeUnknown while
// the node has no config (maintenance mode).
func (r *Runtime) MachineType(ctx context.Context) machine.Type {
	if r.State == nil {
		return machine.TypeUnknown
	}

	res, err := safe.StateGetByID[*configres.MachineType](ctx, r.State, configres.MachineTypeID)
	if err != nil {
		return machine.TypeUnknown
	}

	return res.MachineType()
}

// WaitMachineType blocks until the MachineType resource exists (a config is active) and
// returns the type.
func (r *Runtime) WaitMachineType(ctx context.Context) (machine.Type, error) {
	res, err := safe.StateWatchFor[*configres.MachineType](ctx, r.State, configres.NewMachineType().Metadata(),
		state.WithEventTypes(state.Created, state.Updated))
	if err != nil {
		return machine.TypeUnknown, fmt.Errorf("waiting for the machine type: %w", err)
	}

	return res.MachineType(), nil
}

// Validate checks a config for this node's mode and returns an error naming each failing field.
// Every config a node takes passes here: apply-config in any mode (maintenance too), patch,
// edit, and the staged, saved or --config one at boot.
func (r *Runtime) Validate(cfg config.Provider) ([]string, error) {
	if err := RequireV1Alpha1(cfg); err != nil {
		return nil, err
	}

	warnings, err := cfg.Validate(r.Mode)
	if err != nil {
		return warnings, fmt.Errorf("config is not valid for %s mode: %w", r.Mode, err)
	}

	// A TrustedRootsConfig that is not PEM certificates would add nothing to the trust bundle.
	if err = trustbundle.Validate(cfg); err != nil {
		return warnings, fmt.Errorf("config is not valid: %w", err)
	}

	if err = UserSettings(cfg); err != nil {
		return warnings, fmt.Errorf("config is not valid: %w", err)
	}

	if err = errors.Join(configsupport.Check(cfg, r.Mode.Node()), KubernetesSupport(cfg), VolumeSupport(cfg)); err != nil {
		return warnings, fmt.Errorf("config asks for what this node cannot do yet: %w", err)
	}

	return warnings, nil
}
