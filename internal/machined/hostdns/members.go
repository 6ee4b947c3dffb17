package hostdns

import (
	"net/netip"
	"strings"

	"github.com/miekg/dns"
)

// Member is a cluster member the host DNS answers for (machine.features.hostDNS.resolveMemberNames):
// its names (hostname, node name) and addresses.
type Member struct {
	Names     []string
	Addresses []netip.Addr
}

// memberTTL is upstream's TTL of the answers it makes itself: short, as members come and go.
const memberTTL = 10

// SetMembers replaces the members answered for; nil stops answering for them.
func (r *Resolver) SetMembers(members []Member) {
	r.mu.Lock()
	defer r.mu.Unlock()

	r.members = members
}

// memberAnswer is the answer to an A or AAAA query for a member's name, as upstream matches it:
// the name in full, or its first label (a member "node1.example.org" is also "node1"). Nil: no
// member has the name or an address of that family, and the query is forwarded.
func (r *Resolver) memberAnswer(req *dns.Msg) *dns.Msg {
	q := req.Question[0]
	if q.Qclass != dns.ClassINET || (q.Qtype != dns.TypeA && q.Qtype != dns.TypeAAAA) {
		return nil
	}

	r.mu.Lock()
	members := r.members
	r.mu.Unlock()

	name := strings.ToLower(strings.TrimSuffix(q.Name, "."))

	for _, m := range members {
		if !nameMatches(name, m.Names) {
			continue
		}

		var answer []dns.RR

		for _, a := range m.Addresses {
			hdr := dns.RR_Header{Name: q.Name, Rrtype: q.Qtype, Class: dns.ClassINET, Ttl: memberTTL}

			switch {
			case q.Qtype == dns.TypeA && a.Is4():
				answer = append(answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
			case q.Qtype == dns.TypeAAAA && a.Is6() && !a.Is4In6():
				answer = append(answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
			}
		}

		if len(answer) == 0 {
			return nil
		}

		resp := new(dns.Msg)
		resp.SetReply(req)
		resp.Authoritative = true
		resp.Answer = answer

		return resp
	}

	return nil
}

func nameMatches(name string, names []string) bool {
	for _, n := range names {
		n = strings.ToLower(strings.TrimSuffix(n, "."))
		if n == "" {
			continue
		}

		if first, _, _ := strings.Cut(n, "."); name == n || name == first {
			return true
		}
	}

	return false
}
