package network_test

import (
	"testing"

	"github.com/siderolabs/go-pointer"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"

	"github.com/talos-go/talos/internal/machined/controllers/ctest"
	networkctrl "github.com/talos-go/talos/internal/machined/controllers/network"
)

// TestBondOptionsFromConfig: every bonding option of machine.network.interfaces[].bond reaches
// the bond's link spec, the named ones parsed, the primary member by its link's index (the
// link controller sends them to the kernel: TestBondNetlinkData).
func TestBondOptionsFromConfig(t *testing.T) {
	env := ctest.Start(t, &networkctrl.ConfigSpecController{})

	primary := network.NewLinkStatus(network.NamespaceName, "pm0")
	primary.TypedSpec().Index, primary.TypedSpec().Type = 42, nethelpers.LinkEther
	env.Create(primary)

	env.Put(ctest.MachineConfig(t, machine.TypeWorker, interfacesConfig(
		&v1alpha1.Device{DeviceInterface: "bad0", DeviceBond: &v1alpha1.Bond{
			BondMode: "802.3ad", BondHashPolicy: "layer3+4", BondLACPRate: "fast", BondADSelect: "bandwidth", BondADActorSysPrio: 100,
			BondADUserPortKey: 5, BondMinLinks: 1, BondMIIMon: 100, BondResendIGMP: 3, BondNumPeerNotif: 2, BondAllSlavesActive: 1,
			BondPeerNotifyDelay: 200, BondLPInterval: 2,
		}},
		&v1alpha1.Device{DeviceInterface: "bab0", DeviceBond: &v1alpha1.Bond{
			BondMode: "active-backup", BondPrimary: "pm0", BondPrimaryReselect: "better", BondFailOverMac: "active",
			BondARPValidate: "all", BondARPAllTargets: "all", BondARPInterval: 500, BondUseCarrier: pointer.To(false),
		}},
		&v1alpha1.Device{DeviceInterface: "btlb0", DeviceBond: &v1alpha1.Bond{BondMode: "balance-tlb", BondTLBDynamicLB: 1}},
		&v1alpha1.Device{DeviceInterface: "brr0", DeviceBond: &v1alpha1.Bond{BondMode: "balance-rr", BondPacketsPerSlave: 3}},
	)))

	for id, want := range map[string]network.BondMasterSpec{
		"bad0": {
			Mode: nethelpers.BondMode8023AD, HashPolicy: nethelpers.BondXmitPolicyLayer34, LACPRate: nethelpers.LACPRateFast,
			ADSelect: nethelpers.ADSelectBandwidth, ADActorSysPrio: 100, ADUserPortKey: 5, MinLinks: 1, MIIMon: 100, ResendIGMP: 3,
			NumPeerNotif: 2, AllSlavesActive: 1, PeerNotifyDelay: 200, LPInterval: 2, UseCarrier: true,
		},
		"bab0": {
			Mode: nethelpers.BondModeActiveBackup, PrimaryIndex: 42, PrimaryReselect: nethelpers.PrimaryReselectBetter,
			FailOverMac: nethelpers.FailOverMACActive, ARPValidate: nethelpers.ARPValidateAll, ARPAllTargets: nethelpers.ARPAllTargetsAll,
			ARPInterval: 500, UseCarrier: false,
		},
		"btlb0": {Mode: nethelpers.BondModeTLB, TLBDynamicLB: 1, UseCarrier: true},
		"brr0":  {Mode: nethelpers.BondModeRoundrobin, PacketsPerSlave: 3, UseCarrier: true},
	} {
		ctest.AssertResource(env, network.LinkID(id), func(r *network.LinkSpec, a *assert.Assertions) {
			a.Equal("bond", r.TypedSpec().Kind)
			a.Equal(want, r.TypedSpec().BondMaster, id)
		})
	}
}
