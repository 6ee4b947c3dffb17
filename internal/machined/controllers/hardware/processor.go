package hardware

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"go.uber.org/zap"
)

// ProcessorController publishes one Processor per CPU socket found in /proc/cpuinfo, with IDs
// as on Talos (CPU_0, CPU_1, ...).
type ProcessorController struct {
	// Root is the filesystem root to read from ("/" when empty).
	Root string
}

// Name implements controller.Controller.
func (ctrl *ProcessorController) Name() string { return "hardware.ProcessorController" }

// Inputs implements controller.Controller.
func (ctrl *ProcessorController) Inputs() []controller.Input { return nil }

// Outputs implements controller.Controller.
func (ctrl *ProcessorController) Outputs() []controller.Output {
	return []controller.Output{{Type: hardware.ProcessorType, Kind: controller.OutputExclusive}}
}

// Run implements controller.Controller.
func (ctrl *ProcessorController) Run(ctx context.Context, r controller.Runtime, _ *zap.Logger) error {
	sockets, err := ParseCPUInfo(filepath.Join(rootOf(ctrl.Root), "proc", "cpuinfo"))
	if err != nil {
		return err
	}

	for i, s := range sockets {
		if err := safe.WriterModify(ctx, r, hardware.NewProcessorInfo(fmt.Sprintf("CPU_%d", i)), func(res *hardware.Processor) error {
			*res.TypedSpec() = s

			return nil
		}); err != nil {
			return fmt.Errorf("writing processor %d: %w", i, err)
		}
	}

	<-ctx.Done()

	return nil
}

// ParseCPUInfo summarizes /proc/cpuinfo per physical socket: vendor, model, speed, cores and
// threads.
func ParseCPUInfo(path string) ([]hardware.ProcessorSpec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading cpu information: %w", err)
	}
	defer f.Close()

	type socket struct {
		spec    hardware.ProcessorSpec
		threads uint32
	}

	var (
		order   []string
		sockets = map[string]*socket{}
		cur     = map[string]string{}
	)

	flush := func() {
		if len(cur) == 0 {
			return
		}

		id := cur["physical id"]

		s, ok := sockets[id]
		if !ok {
			s = &socket{spec: hardware.ProcessorSpec{
				Socket:       "CPU " + cmp.Or(id, "0"),
				Manufacturer: cur["vendor_id"],
				ProductName:  cur["model name"],
			}}

			if mhz, err := strconv.ParseFloat(cur["cpu MHz"], 64); err == nil {
				s.spec.BootSpeed = uint32(mhz)
			}

			if cores, err := strconv.ParseUint(cur["cpu cores"], 10, 32); err == nil {
				s.spec.CoreCount, s.spec.CoreEnabled = uint32(cores), uint32(cores)
			}

			sockets[id] = s
			order = append(order, id)
		}

		s.threads++
		cur = map[string]string{}
	}

	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			flush()

			continue
		}

		if k, v, ok := strings.Cut(line, ":"); ok {
			cur[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}

	flush()

	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading cpu information: %w", err)
	}

	out := make([]hardware.ProcessorSpec, 0, len(order))

	for _, id := range order {
		s := sockets[id]
		s.spec.ThreadCount = s.threads

		if s.spec.CoreCount == 0 {
			s.spec.CoreCount, s.spec.CoreEnabled = s.threads, s.threads
		}

		out = append(out, s.spec)
	}

	return out, nil
}
