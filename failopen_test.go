package sluice_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// downStore answers nothing.
type downStore struct{ sluice.Store }

func (downStore) Admit(context.Context, time.Time, sluice.Batch, []sluice.ChargeResult) (bool, error) {
	return false, errors.New("connection refused")
}

func TestLimiter_OnStoreErrorOpenAdmitsUncharged(t *testing.T) {
	open := sluice.Rule{Name: "open", Kind: sluice.KindRate, Subject: "key", Limit: 1, Window: time.Minute, OnStoreError: sluice.StoreErrorOpen}
	closed := sluice.Rule{Name: "closed", Kind: sluice.KindRate, Subject: "key", Limit: 1, Window: time.Minute}
	shadowClosed := closed
	shadowClosed.Name, shadowClosed.Mode = "shadow", sluice.ModeShadow
	tests := []struct {
		name  string
		rules []sluice.Rule
		open  bool
	}{
		{"every rule open", []sluice.Rule{open}, true},
		{"a shadow rule does not hold it closed", []sluice.Rule{open, shadowClosed}, true},
		{"one rule closed", []sluice.Rule{open, closed}, false},
		{"default is closed", []sluice.Rule{closed}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := sluice.New(sluice.Options{Store: downStore{}, Rules: tt.rules})
			if err != nil {
				t.Fatal(err)
			}
			r, err := l.Admit(context.Background(), sluice.Request{Identity: sluice.Identity{Key: "k"}})
			if !tt.open {
				if !errors.Is(err, sluice.ErrStoreUnavailable) {
					t.Fatalf("got %v, want store unavailable", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("admit: %v", err)
			}
			if !r.Result().FailedOpen || len(r.Charges()) != 0 || l.Stats().FailedOpen != 1 {
				t.Fatalf("result %+v, charges %d, stats %+v", r.Result(), len(r.Charges()), l.Stats())
			}
			if got := r.Result().FailedOpenRules; !slices.Equal(got, []string{"open"}) {
				t.Fatalf("FailedOpenRules = %v, want [open] (the shadow rule is not one)", got)
			}
			if err := r.Settle(context.Background(), sluice.Usage{InputTokens: 5}); err != nil {
				t.Fatalf("settle of an uncharged admission: %v", err)
			}
		})
	}
}
