package network

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/cosi-project/runtime/pkg/controller"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// NfTablesTable is the inet table the node's chains live in, as upstream's.
const NfTablesTable = "talos"

// NfTablesChainController puts the NfTablesChain resources into the kernel: table inet talos
// is replaced as a whole, in one netlink transaction, whenever a chain changes (no moment with
// half a ruleset); with no chains, the table goes.
type NfTablesChainController struct {
	// LoadModule loads a kernel module (metal: nf_tables and nft_ct are modules of its kernel,
	// and the node has no modprobe for the kernel to call); nil: the kernel has them.
	LoadModule func(name string) error
}

// nfTablesModules are the modules the chains need.
var nfTablesModules = []string{"nf_tables", "nft_ct"}

// Name implements controller.Controller.
func (ctrl *NfTablesChainController) Name() string { return "network.NfTablesChainController" }

// Inputs implements controller.Controller.
func (ctrl *NfTablesChainController) Inputs() []controller.Input {
	return []controller.Input{{Namespace: network.NamespaceName, Type: network.NfTablesChainType, Kind: controller.InputWeak}}
}

// Outputs implements controller.Controller.
func (ctrl *NfTablesChainController) Outputs() []controller.Output { return nil }

// Run implements controller.Controller.
func (ctrl *NfTablesChainController) Run(ctx context.Context, r controller.Runtime, log *zap.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.EventCh():
		}

		chains, err := safe.ReaderListAll[*network.NfTablesChain](ctx, r)
		if err != nil {
			return err
		}

		specs := map[string]network.NfTablesChainSpec{}
		for c := range chains.All() {
			specs[c.Metadata().ID()] = *c.TypedSpec()
		}

		if len(specs) > 0 && ctrl.LoadModule != nil {
			for _, m := range nfTablesModules {
				if err = ctrl.LoadModule(m); err != nil {
					log.Error("nftables: loading a kernel module", zap.String("module", m), zap.Error(err))
				}
			}
		}

		if err = ApplyNfTables(specs); err != nil {
			// A chain the kernel refuses leaves the previous ruleset in place.
			log.Error("nftables: the chains were not applied", zap.Error(err))

			continue
		}

		log.Info("nftables: chains applied", zap.Int("chains", len(specs)))
	}
}

// ApplyNfTables replaces table inet talos with the chains, in one transaction.
func ApplyNfTables(chains map[string]network.NfTablesChainSpec) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}

	table := &nftables.Table{Family: nftables.TableFamilyINet, Name: NfTablesTable}

	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil && len(chains) == 0 && errors.Is(err, unix.EPROTONOSUPPORT) {
		return nil // nf_tables is not loaded (metal loads it for the first chain): no table of ours to remove
	}

	if err != nil {
		return fmt.Errorf("listing nftables tables: %w (does the kernel have nf_tables?)", err)
	}

	if slices.ContainsFunc(tables, func(t *nftables.Table) bool { return t.Name == NfTablesTable }) {
		c.DelTable(table)
	}

	if len(chains) > 0 {
		c.AddTable(table)

		names := make([]string, 0, len(chains))
		for name := range chains {
			names = append(names, name)
		}

		slices.Sort(names)

		for _, name := range names {
			if err = addChain(c, table, name, chains[name]); err != nil {
				return fmt.Errorf("chain %s: %w", name, err)
			}
		}
	}

	return c.Flush()
}

func addChain(c *nftables.Conn, table *nftables.Table, name string, spec network.NfTablesChainSpec) error {
	hooks := map[nethelpers.NfTablesChainHook]*nftables.ChainHook{
		nethelpers.ChainHookPrerouting: nftables.ChainHookPrerouting, nethelpers.ChainHookInput: nftables.ChainHookInput,
		nethelpers.ChainHookForward: nftables.ChainHookForward, nethelpers.ChainHookOutput: nftables.ChainHookOutput,
		nethelpers.ChainHookPostrouting: nftables.ChainHookPostrouting,
	}

	hook, ok := hooks[spec.Hook]
	if !ok {
		return fmt.Errorf("unknown hook %v", spec.Hook)
	}

	policy := nftables.ChainPolicyAccept
	if spec.Policy == nethelpers.VerdictDrop {
		policy = nftables.ChainPolicyDrop
	}

	chainType := nftables.ChainTypeFilter
	if spec.Type != "" {
		chainType = nftables.ChainType(spec.Type)
	}

	chain := c.AddChain(&nftables.Chain{
		Name: name, Table: table, Type: chainType, Hooknum: hook,
		Priority: nftables.ChainPriorityRef(nftables.ChainPriority(spec.Priority)), Policy: &policy,
	})

	for i, rule := range spec.Rules {
		variants, err := ruleExprs(c, table, rule)
		if err != nil {
			return fmt.Errorf("rule %d: %w", i, err)
		}

		for _, exprs := range variants {
			c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: exprs})
		}
	}

	return nil
}

var errUnsupported = errors.New("not supported by this node")

// ruleExprs are a rule's expressions: one list per address family it matches (an address
// match is per family) and per destination port range.
func ruleExprs(c *nftables.Conn, table *nftables.Table, rule network.NfTablesRule) ([][]expr.Any, error) {
	switch {
	case rule.MatchOIfName != nil, rule.MatchMark != nil, rule.MatchLimit != nil, rule.ClampMSS != nil, rule.SetMark != nil:
		return nil, fmt.Errorf("a match on the output interface, a mark, a limit, MSS clamping or setting a mark: %w", errUnsupported)
	case rule.MatchLayer4 != nil && (rule.MatchLayer4.MatchSourcePort != nil || rule.MatchLayer4.MatchICMPType != nil):
		return nil, fmt.Errorf("a match on the source port or ICMP type: %w", errUnsupported)
	}

	var common []expr.Any

	if m := rule.MatchIIfName; m != nil {
		if len(m.InterfaceNames) != 1 {
			return nil, fmt.Errorf("a match on %d interface names (one only): %w", len(m.InterfaceNames), errUnsupported)
		}

		op := expr.CmpOpEq
		if m.Operator == nethelpers.OperatorNotEqual {
			op = expr.CmpOpNeq
		}

		common = append(common, &expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1}, &expr.Cmp{Op: op, Register: 1, Data: ifname(m.InterfaceNames[0])})
	}

	if m := rule.MatchConntrackState; m != nil {
		var bits uint32
		for _, s := range m.States {
			bits |= uint32(s)
		}

		common = append(common,
			&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binary.NativeEndian.AppendUint32(nil, bits), Xor: make([]byte, 4)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)})
	}

	// The address matches, per family: a rule with addresses of one family only matches that one.
	families := []nftables.TableFamily{nftables.TableFamilyUnspecified}
	if rule.MatchSourceAddress != nil || rule.MatchDestinationAddress != nil {
		families = []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6}
	}

	var out [][]expr.Any

	for _, fam := range families {
		ports := []network.PortRange{{}}

		if l4 := rule.MatchLayer4; l4 != nil && l4.MatchDestinationPort != nil && len(l4.MatchDestinationPort.Ranges) > 0 {
			ports = l4.MatchDestinationPort.Ranges
		}

		// A rule per port range, each with sets of its own: an anonymous set belongs to one rule.
		for _, pr := range ports {
			exprs, ok, err := familyExprs(c, table, fam, rule)
			if err != nil {
				return nil, err
			}

			if !ok {
				break // no address of this family: the rule cannot match it
			}

			exprs = append(slices.Clone(common), exprs...)

			if l4 := rule.MatchLayer4; l4 != nil {
				exprs = append(exprs, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{byte(l4.Protocol)}})
			}

			if pr != (network.PortRange{}) {
				exprs = append(exprs, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
					&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: binary.BigEndian.AppendUint16(nil, pr.Lo), ToData: binary.BigEndian.AppendUint16(nil, pr.Hi)})
			}

			if rule.AnonCounter {
				exprs = append(exprs, &expr.Counter{})
			}

			if rule.Verdict != nil {
				v := expr.VerdictDrop
				if *rule.Verdict == nethelpers.VerdictAccept {
					v = expr.VerdictAccept
				}

				exprs = append(exprs, &expr.Verdict{Kind: v})
			}

			out = append(out, exprs)
		}
	}

	return out, nil
}

// familyExprs match the rule's addresses of family fam (nothing for a rule without addresses,
// fam unspecified); ok is false when the rule cannot match that family.
func familyExprs(c *nftables.Conn, table *nftables.Table, fam nftables.TableFamily, rule network.NfTablesRule) ([]expr.Any, bool, error) {
	if fam == nftables.TableFamilyUnspecified {
		return nil, true, nil
	}

	exprs := []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{byte(fam)}}}

	for _, m := range []struct {
		match *network.NfTablesAddressMatch
		dst   bool
	}{{rule.MatchSourceAddress, false}, {rule.MatchDestinationAddress, true}} {
		if m.match == nil {
			continue
		}

		more, ok, err := addressExprs(c, table, fam, m.match, m.dst)
		if err != nil || !ok {
			return nil, false, err
		}

		exprs = append(exprs, more...)
	}

	return exprs, true, nil
}

// addressExprs match the packet's source (or destination) address against the match's subnets
// of family fam, through anonymous interval sets; ok is false when the match has no subnet of
// that family to include (and is not inverted): the rule cannot match that family.
func addressExprs(c *nftables.Conn, table *nftables.Table, fam nftables.TableFamily, m *network.NfTablesAddressMatch, dst bool) ([]expr.Any, bool, error) {
	is4 := fam == nftables.TableFamilyIPv4
	ofFamily := func(ps []netip.Prefix) []netip.Prefix {
		return slices.DeleteFunc(slices.Clone(ps), func(p netip.Prefix) bool { return p.Addr().Is4() != is4 })
	}

	include, exclude := ofFamily(m.IncludeSubnets), ofFamily(m.ExcludeSubnets)
	if len(include) == 0 && !m.Invert {
		return nil, false, nil
	}

	offset, size, keyType := uint32(12), uint32(4), nftables.TypeIPAddr
	if !is4 {
		offset, size, keyType = 8, 16, nftables.TypeIP6Addr
	}

	if dst {
		offset += size
	}

	load := &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: size}

	var exprs []expr.Any

	for _, s := range []struct {
		prefixes []netip.Prefix
		invert   bool
	}{{include, m.Invert}, {exclude, true}} {
		if len(s.prefixes) == 0 {
			continue
		}

		set := &nftables.Set{Table: table, Anonymous: true, Constant: true, Interval: true, KeyType: keyType}
		if err := c.AddSet(set, intervalElements(s.prefixes, is4)); err != nil {
			return nil, false, err
		}

		exprs = append(exprs, load, &expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID, Invert: s.invert})
	}

	return exprs, true, nil
}

// intervalElements are an interval set's elements for the prefixes, as nft writes them: a
// leading end at the zero address, then each merged range's start and its end (the address
// after it), the last end left out when a range reaches the top of the family.
func intervalElements(prefixes []netip.Prefix, is4 bool) []nftables.SetElement {
	type span struct{ lo, hi netip.Addr }

	var spans []span

	for _, p := range prefixes {
		p = p.Masked()
		spans = append(spans, span{p.Addr(), lastAddr(p)})
	}

	slices.SortFunc(spans, func(a, b span) int { return a.lo.Compare(b.lo) })

	var merged []span

	for _, s := range spans {
		if n := len(merged); n > 0 && (s.lo.Compare(merged[n-1].hi) <= 0 || merged[n-1].hi.Next() == s.lo) {
			if s.hi.Compare(merged[n-1].hi) > 0 {
				merged[n-1].hi = s.hi
			}

			continue
		}

		merged = append(merged, s)
	}

	zero := netip.IPv6Unspecified()
	if is4 {
		zero = netip.IPv4Unspecified()
	}

	var elems []nftables.SetElement

	if merged[0].lo != zero {
		elems = append(elems, nftables.SetElement{Key: zero.AsSlice(), IntervalEnd: true})
	}

	for _, s := range merged {
		elems = append(elems, nftables.SetElement{Key: s.lo.AsSlice()})

		if next := s.hi.Next(); next.IsValid() {
			elems = append(elems, nftables.SetElement{Key: next.AsSlice(), IntervalEnd: true})
		}
	}

	return elems
}

// lastAddr is the last address of the prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}

	a, _ := netip.AddrFromSlice(b)

	return a
}

// ifname is an interface name as the kernel compares it: NUL-padded to IFNAMSIZ.
func ifname(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)

	return b
}
