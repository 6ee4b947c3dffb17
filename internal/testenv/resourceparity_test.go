package testenv

import (
	"reflect"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// TestCheckEnums: values machinery defines pass; an unknown enum value, an unknown flag bit
// and a required field left empty are caught.
func TestCheckEnums(t *testing.T) {
	good := network.AddressStatusSpec{Family: nethelpers.FamilyInet4, Scope: nethelpers.ScopeGlobal, Flags: nethelpers.AddressFlags(nethelpers.AddressPermanent)}
	if n, errs := checkEnums(reflect.ValueOf(&good), "spec"); n != 3 || len(errs) != 0 {
		t.Errorf("valid spec: %d enums checked, errors %v; want 3 and none", n, errs)
	}

	bad := good
	bad.Family = nethelpers.Family(99)
	bad.Flags |= 1 << 30

	if _, errs := checkEnums(reflect.ValueOf(&bad), "spec"); len(errs) != 2 {
		t.Errorf("family 99 and flag bit 30: got errors %v, want two", errs)
	}

	// A route's flags as the kernel gives them (RTNH_F_ONLINK, unnamed in machinery) pass,
	// as upstream copies them.
	route := network.RouteStatusSpec{Family: nethelpers.FamilyInet4, Flags: 4}
	if _, errs := checkEnums(reflect.ValueOf(&route), "spec"); len(errs) != 0 {
		t.Errorf("route flags 4: %v", errs)
	}

	ms := runtimeres.MachineStatusSpec{Stage: runtimeres.MachineStage(42)}
	if _, errs := checkEnums(reflect.ValueOf(&ms), "spec"); len(errs) != 1 {
		t.Errorf("stage 42: got errors %v, want one", errs)
	}

	if v := fieldByPath(reflect.ValueOf(&runtimeres.MachineStatusSpec{}), "Stage"); !v.IsValid() || !v.IsZero() {
		t.Errorf("fieldByPath(Stage) = %v, want the zero stage", v)
	}
}
