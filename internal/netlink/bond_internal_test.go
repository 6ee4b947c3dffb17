package netlink

import (
	"encoding/binary"
	"testing"

	mdnetlink "github.com/mdlayher/netlink"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// bondAttributes encodes the bond's IFLA_INFO_DATA as the link controller sends it, and reads
// back each attribute's value (its native-endian integer; the ARP targets are not set here).
func bondAttributes(t *testing.T, s network.BondMasterSpec) map[uint16]uint64 {
	t.Helper()

	ae := mdnetlink.NewAttributeEncoder()
	require.NoError(t, BondData(s).Encode(ae))

	b, err := ae.Encode()
	require.NoError(t, err)

	attrs, err := mdnetlink.UnmarshalAttributes(b)
	require.NoError(t, err)

	out := map[uint16]uint64{}

	for _, a := range attrs {
		switch len(a.Data) {
		case 1:
			out[a.Type] = uint64(a.Data[0])
		case 2:
			out[a.Type] = uint64(binary.NativeEndian.Uint16(a.Data))
		case 4:
			out[a.Type] = uint64(binary.NativeEndian.Uint32(a.Data))
		default:
			t.Fatalf("attribute %d: %d bytes", a.Type, len(a.Data))
		}
	}

	return out
}

// TestBondNetlinkData: the bond the link controller creates carries every bonding option of its
// spec as the kernel's IFLA_BOND_* attribute with the kernel's value; options left at zero are
// not sent (the kernel's defaults stay), use_carrier only when off, packets_per_slave only in
// balance-rr (the kernel refuses it in the other modes).
func TestBondNetlinkData(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec network.BondMasterSpec
		want map[uint16]uint64
	}{
		{
			"802.3ad",
			network.BondMasterSpec{
				Mode: nethelpers.BondMode8023AD, HashPolicy: nethelpers.BondXmitPolicyLayer34, LACPRate: nethelpers.LACPRateFast,
				ADSelect: nethelpers.ADSelectBandwidth, ADActorSysPrio: 100, ADUserPortKey: 5, MinLinks: 1, MIIMon: 100, UpDelay: 200,
				DownDelay: 300, ResendIGMP: 3, NumPeerNotif: 2, AllSlavesActive: 1, PeerNotifyDelay: 200, LPInterval: 2, UseCarrier: true,
				PacketsPerSlave: 1,
			},
			map[uint16]uint64{
				unix.IFLA_BOND_MODE: 4, unix.IFLA_BOND_XMIT_HASH_POLICY: 1, unix.IFLA_BOND_AD_LACP_RATE: 1, unix.IFLA_BOND_AD_SELECT: 1,
				unix.IFLA_BOND_AD_ACTOR_SYS_PRIO: 100, unix.IFLA_BOND_AD_USER_PORT_KEY: 5, unix.IFLA_BOND_MIN_LINKS: 1,
				unix.IFLA_BOND_MIIMON: 100, unix.IFLA_BOND_UPDELAY: 200, unix.IFLA_BOND_DOWNDELAY: 300, unix.IFLA_BOND_RESEND_IGMP: 3,
				unix.IFLA_BOND_NUM_PEER_NOTIF: 2, unix.IFLA_BOND_ALL_SLAVES_ACTIVE: 1, unix.IFLA_BOND_PEER_NOTIF_DELAY: 200,
				unix.IFLA_BOND_LP_INTERVAL: 2,
			},
		},
		{
			"active-backup",
			network.BondMasterSpec{
				Mode: nethelpers.BondModeActiveBackup, PrimaryIndex: 42, PrimaryReselect: nethelpers.PrimaryReselectBetter,
				FailOverMac: nethelpers.FailOverMACActive, ARPValidate: nethelpers.ARPValidateAll, ARPAllTargets: nethelpers.ARPAllTargetsAll,
				ARPInterval: 500, UseCarrier: false,
			},
			map[uint16]uint64{
				unix.IFLA_BOND_MODE: 1, unix.IFLA_BOND_PRIMARY: 42, unix.IFLA_BOND_PRIMARY_RESELECT: 1, unix.IFLA_BOND_FAIL_OVER_MAC: 1,
				unix.IFLA_BOND_ARP_VALIDATE: 3, unix.IFLA_BOND_ARP_ALL_TARGETS: 1, unix.IFLA_BOND_ARP_INTERVAL: 500,
				unix.IFLA_BOND_USE_CARRIER: 0,
			},
		},
		{
			"balance-tlb",
			network.BondMasterSpec{Mode: nethelpers.BondModeTLB, TLBDynamicLB: 1, UseCarrier: true},
			map[uint16]uint64{unix.IFLA_BOND_MODE: 5, unix.IFLA_BOND_TLB_DYNAMIC_LB: 1},
		},
		{
			"balance-rr",
			network.BondMasterSpec{Mode: nethelpers.BondModeRoundrobin, PacketsPerSlave: 3, UseCarrier: true},
			map[uint16]uint64{unix.IFLA_BOND_MODE: 0, unix.IFLA_BOND_PACKETS_PER_SLAVE: 3},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, bondAttributes(t, tc.spec))
		})
	}
}
