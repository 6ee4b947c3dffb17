package network

import "context"

// linkKeepers runs one goroutine per link that keeps something on it (a DHCP lease): started when
// the link is wanted, stopped when it is not, or is wanted with another key (a DHCPv6 DUID).
type linkKeepers[K comparable] map[string]linkKeeper[K]

type linkKeeper[K comparable] struct {
	key    K
	cancel context.CancelFunc
}

// update stops the keepers of links not in want (or with another key), starts those missing, and
// returns the links it stopped, whose leases are gone with them.
func (ks linkKeepers[K]) update(ctx context.Context, want map[string]K, keep func(ctx context.Context, link string, key K)) []string {
	var stopped []string

	for link, k := range ks {
		if key, ok := want[link]; !ok || key != k.key {
			k.cancel()
			delete(ks, link)

			stopped = append(stopped, link)
		}
	}

	for link, key := range want {
		if _, ok := ks[link]; !ok {
			linkCtx, cancel := context.WithCancel(ctx)
			ks[link] = linkKeeper[K]{key: key, cancel: cancel}

			go keep(linkCtx, link, key)
		}
	}

	return stopped
}

// stop stops every keeper.
func (ks linkKeepers[K]) stop() {
	for _, k := range ks {
		k.cancel()
	}
}
