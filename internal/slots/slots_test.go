package slots

import (
	"strings"
	"testing"

	"github.com/talos-go/talos/internal/meta"
)

func TestChoose(t *testing.T) {
	both := func(string) bool { return true }
	onlyA := func(s string) bool { return s == A }

	for _, tc := range []struct {
		name      string
		in        meta.Values
		installed func(string) bool
		slot      string
		trial     bool
		after     meta.Values // keys to check afterwards ("" = unset)
		errPart   string
	}{
		{name: "fresh node boots A", in: meta.Values{}, installed: both, slot: A, after: meta.Values{meta.ActiveSlot: A}},
		{name: "active B", in: meta.Values{meta.ActiveSlot: B}, installed: both, slot: B},
		{name: "boot-once tries the other slot", in: meta.Values{meta.ActiveSlot: A, meta.BootOnce: B}, installed: both,
			slot: B, trial: true, after: meta.Values{meta.BootOnce: "", meta.TrialSlot: B, meta.ActiveSlot: A}},
		{name: "unreported trial falls back", in: meta.Values{meta.ActiveSlot: A, meta.TrialSlot: B, meta.WipeEphemeral: "1"}, installed: both,
			slot: A, after: meta.Values{meta.TrialSlot: "", meta.ActiveSlot: A, meta.WipeEphemeral: ""}},
		{name: "boot-once to an empty slot is ignored", in: meta.Values{meta.ActiveSlot: A, meta.BootOnce: B}, installed: onlyA,
			slot: A, after: meta.Values{meta.BootOnce: "", meta.TrialSlot: ""}},
		{name: "boot-once to the active slot is no trial", in: meta.Values{meta.ActiveSlot: A, meta.BootOnce: A}, installed: both, slot: A},
		{name: "empty active slot uses the other", in: meta.Values{meta.ActiveSlot: B}, installed: onlyA, slot: A, after: meta.Values{meta.ActiveSlot: A}},
		{name: "damaged active", in: meta.Values{meta.ActiveSlot: "C"}, installed: both, errPart: "not a slot"},
		{name: "nothing installed", in: meta.Values{}, installed: func(string) bool { return false }, errPart: "no slot holds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Choose(tc.in, tc.installed)
			if tc.errPart != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errPart) {
					t.Fatalf("got %v, want error with %q", err, tc.errPart)
				}

				return
			}

			if err != nil {
				t.Fatal(err)
			}

			if d.Slot != tc.slot || d.Trial != tc.trial {
				t.Fatalf("got slot %s trial %v, want %s %v", d.Slot, d.Trial, tc.slot, tc.trial)
			}

			for k, want := range tc.after {
				if tc.in[k] != want {
					t.Fatalf("META %s = %q, want %q", k, tc.in[k], want)
				}
			}
		})
	}
}

func TestMarkBootSuccessful(t *testing.T) {
	s, _ := meta.Open(t.TempDir())
	if err := s.Set(meta.ActiveSlot, A, meta.TrialSlot, B); err != nil {
		t.Fatal(err)
	}

	// The old slot reporting does not complete the trial.
	if done, err := MarkBootSuccessful(s, A); err != nil || done {
		t.Fatalf("slot A completed B's trial: %v %v", done, err)
	}

	if done, err := MarkBootSuccessful(s, B); err != nil || !done {
		t.Fatalf("slot B trial not completed: %v %v", done, err)
	}

	v, _ := s.Read()
	if v[meta.ActiveSlot] != B || v[meta.TrialSlot] != "" {
		t.Fatalf("META after success: %v", v)
	}
}
