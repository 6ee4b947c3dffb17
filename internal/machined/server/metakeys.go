package server

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	runtimeres "github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/talos-go/talos/internal/meta"
)

// SyncMetaKeys publishes the META store's Talos keys as MetaKey resources, as upstream's
// `get metakeys` shows them: one per key set (ID "0x0a", value as written), none for a key
// deleted. machined calls it at boot and the API after every META write or delete.
func SyncMetaKeys(ctx context.Context, st state.State, metaDir string) error {
	store, err := meta.Open(metaDir)
	if err != nil {
		return err
	}

	values, err := store.Read()
	if err != nil {
		return err
	}

	want := map[string]string{}

	for k, v := range values {
		tag, ok := strings.CutPrefix(k, meta.TalosKeyPrefix)
		if !ok {
			continue
		}

		n, err := strconv.ParseUint(tag, 16, 8)
		if err != nil {
			continue // not one of ours: the API writes two hex digits
		}

		value, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return fmt.Errorf("META key %s: %w", k, err)
		}

		want[runtimeres.MetaKeyTagToID(uint8(n))] = string(value)
	}

	for id, value := range want {
		if err = safe.StateModify(ctx, st, runtimeres.NewMetaKey(runtimeres.NamespaceName, id), func(r *runtimeres.MetaKey) error {
			r.TypedSpec().Value = value

			return nil
		}); err != nil {
			return err
		}
	}

	have, err := safe.StateListAll[*runtimeres.MetaKey](ctx, st)
	if err != nil {
		return err
	}

	for r := range have.All() {
		if _, ok := want[r.Metadata().ID()]; !ok {
			if err = st.Destroy(ctx, r.Metadata()); err != nil && !state.IsNotFoundError(err) {
				return err
			}
		}
	}

	return nil
}
