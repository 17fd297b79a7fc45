package memstore

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/inproc"
)

// admitOne, the shortcut for one subject, admits and refuses as
// admitPlanned does, to the last result field, through random admissions
// of every kind of charge, shadow ones among them, with tight limits and
// settlements in between; and settleByRef, the shortcut for settling,
// leaves the counters as applyLocked does.
func TestStore_AdmitOneAgreesWithAdmitPlanned(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	one, planned := New(Options{Shards: 4, EvictEvery: 3, EvictScan: 2, EvictIdle: time.Millisecond}),
		New(Options{Shards: 4, EvictEvery: 3, EvictScan: 2, EvictIdle: time.Millisecond})
	now := int64(1_700_000_000_000_000_000)
	type open struct{ one, planned *inproc.Admission }
	var pending []open
	subjects := []string{"a", "b", "c"}
	var admitted, refused int
	for id := range uint64(20_000) {
		now += rng.Int64N(int64(50 * time.Millisecond))
		var charges []inproc.Charge
		for rule := range uint64(1 + rng.IntN(inlineCharges)) {
			ch := inproc.Charge{Rule: rule % 4, Amount: rng.Int64N(6), Shadow: rng.IntN(8) == 0}
			switch rule % 4 {
			case 0, 3:
				ch.Kind, ch.Window, ch.Limit, ch.Burst = inproc.Rate, int64(time.Second), 7+int64(rule), rng.Int64N(3)*5
			case 1:
				ch.Kind, ch.Limit, ch.Period = inproc.Budget, 40, now/int64(time.Second)
				ch.PeriodEnd = (ch.Period + 1) * int64(time.Second)
			case 2:
				ch.Kind, ch.Limit = inproc.Concurrency, 3
			}
			charges = append(charges, ch)
		}
		subject := subjects[rng.IntN(len(subjects))]
		a := &inproc.Admission{ID: id + 1, Deadline: now + int64(time.Second), Charges: charges, Subjects: []string{subject}}
		b := &inproc.Admission{ID: id + 1, Deadline: a.Deadline, Charges: append([]inproc.Charge(nil), charges...), Subjects: []string{subject}}
		okOne, okPlanned := one.admitOne(now, a), planned.admitPlanned(now, b)
		if okOne != okPlanned {
			t.Fatalf("admission %d: admitOne %v, admitPlanned %v", id, okOne, okPlanned)
		}
		for i := range a.Charges {
			x, y := a.Charges[i], b.Charges[i]
			x.Shard, x.Ref, y.Shard, y.Ref = 0, 0, 0, 0
			if x != y {
				t.Fatalf("admission %d, charge %d: admitOne %+v, admitPlanned %+v", id, i, x, y)
			}
		}
		if !okOne {
			refused++
		} else {
			admitted++
			if a.HasBudget() {
				one.addOpen(openAdmission{adm: a})
				planned.addOpen(openAdmission{adm: b})
			}
			pending = append(pending, open{a, b})
		}
		for len(pending) > 0 && rng.IntN(3) > 0 {
			k := rng.IntN(len(pending))
			o := pending[k]
			pending = append(pending[:k], pending[k+1:]...)
			for i := range o.one.Charges {
				o.one.Charges[i].Actual = rng.Int64N(8)
				o.planned.Charges[i].Actual = o.one.Charges[i].Actual
				// The planned store settles through its plan
				// (applyLocked), the other by reference
				// (settleByRef): the two agree too.
				o.planned.Charges[i].Shard, o.planned.Charges[i].Ref = 0, 0
			}
			one.settle(now, o.one)
			planned.settle(now, o.planned)
		}
	}
	if refused < 1000 || admitted < 1000 {
		t.Fatalf("%d admitted, %d refused: the test does not exercise both", admitted, refused)
	}
	// Eviction runs per shard, and shards differ with the hash seeds:
	// once everything is settled and idle, neither store keeps anything.
	for _, o := range pending {
		one.settle(now, o.one)
		planned.settle(now, o.planned)
	}
	one.evictAll(now + int64(time.Hour))
	planned.evictAll(now + int64(time.Hour))
	if one.Len() != planned.Len() {
		t.Fatalf("admitOne's store holds %d counters, admitPlanned's %d", one.Len(), planned.Len())
	}
}
