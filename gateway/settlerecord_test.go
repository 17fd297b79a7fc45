package gateway_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/store/memstore"
)

// attachedKey is the context key of an attaching recorder's records.
type attachedKey struct{}

// attaching is a SettlementRecorder that attaches each record to its
// settlement's context as a flag for the store to set when it takes it.
type attaching struct {
	gateway.UsageRecorder
	attached atomic.Int64
}

func (a *attaching) Attach(ctx context.Context, _ gateway.UsageRecord) (context.Context, func() bool) {
	a.attached.Add(1)
	taken := new(atomic.Bool)
	return context.WithValue(ctx, attachedKey{}, taken), taken.Load
}

// takingStore takes the records settlements carry when take is set, after
// failing its next settlements as during an outage, and counts what it
// took.
type takingStore struct {
	sluice.Store
	take     bool
	failures atomic.Int64
	took     atomic.Int64
}

func (s *takingStore) Settle(ctx context.Context, now time.Time, b sluice.Batch) error {
	if s.failures.Add(-1) >= 0 {
		return errors.New("connection refused")
	}
	if err := s.Store.Settle(ctx, now, b); err != nil {
		return err
	}
	if taken, ok := ctx.Value(attachedKey{}).(*atomic.Bool); ok && s.take {
		taken.Store(true)
		s.took.Add(1)
	}
	return nil
}

// A call's usage record goes with its settlement to a store that takes
// it, through the settlement's retries, and is then not recorded again;
// a store that does not take it leaves it to the recorder, once.
func TestGateway_AttachedRecordIsLeftToTheStore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		take           bool
		failures       int64
		took, recorded int64
	}{
		{name: "taken", take: true, took: 1},
		{name: "taken after two failed settlements", take: true, failures: 2, took: 1},
		{name: "not taken", recorded: 1},
		{name: "not taken after two failed settlements", failures: 2, recorded: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := &takingStore{Store: memstore.New(memstore.Options{}), take: tc.take}
			store.failures.Store(tc.failures)
			var rec *attaching
			// The settlement's retries wait on the gateway's clock.
			h := startHarness(t, setup{rules: []sluice.Rule{dailyTokens}, store: store, clock: clocktest.New(time.Now()),
				tweak: []func(*gateway.Options){func(o *gateway.Options) {
					rec = &attaching{UsageRecorder: o.Usage}
					o.Usage = rec
				}}})
			body := `{"model":"mock-small","max_tokens":100,"messages":[{"role":"user","content":"hi [mock tokens=5]"}]}`
			if r := h.post("/v1/chat/completions", body, nil); r.status != 200 {
				t.Fatalf("call %d %s", r.status, r.body)
			}
			eventually(t, "the settlement", func() bool { return store.failures.Load() < 0 && h.used("daily_tokens") < 100 })
			time.Sleep(20 * time.Millisecond) // anything recorded after the settlement has arrived
			if got := rec.attached.Load(); got != 1 {
				t.Errorf("%d records attached, want 1", got)
			}
			if got, recorded := store.took.Load(), int64(len(h.rec.usage())); got != tc.took || recorded != tc.recorded {
				t.Errorf("the store took %d records and the recorder was given %d, want %d and %d", got, recorded, tc.took, tc.recorded)
			}
		})
	}
}
