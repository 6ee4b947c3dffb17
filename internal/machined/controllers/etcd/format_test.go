package etcd_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	etcdctrl "github.com/talos-go/talos/internal/machined/controllers/etcd"
)

func TestFormatMemberID(t *testing.T) {
	// As etcdctl and talosctl print them: 16 hex digits, zero-padded.
	for id, want := range map[uint64]string{
		0:                  "0000000000000000",
		1:                  "0000000000000001",
		0x8e9e05c52164694d: "8e9e05c52164694d",
		^uint64(0):         "ffffffffffffffff",
	} {
		assert.Equal(t, want, etcdctrl.FormatMemberID(id))
	}
}
