package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memstore"
)

// modelCalls is the documented example: 12 calls in flight shared by
// three classes. Their shares are 7, 4 and 1: the floors (6, 3, 0), and
// the 3 the floors leave by weight (3:2:1 of 3 is 1.5, 1 and 0.5; the unit
// left over by rounding goes to the smaller share of the tie).
func modelCalls() sluice.Rule {
	return sluice.Rule{Name: "model-calls", Kind: sluice.KindConcurrency, Subject: "global", Limit: 12, DefaultClass: "standard",
		Classes: []sluice.Class{{Name: "interactive", Weight: 3, Floor: 6}, {Name: "standard", Weight: 2, Floor: 3}, {Name: "batch", Weight: 1}}}
}

// classRate is the same split of 120 requests a minute: shares 75, 40, 5
// (floors 60, 30, 0, and the 30 left by 3:2:1).
func classRate() sluice.Rule {
	return sluice.Rule{Name: "rpm-classes", Kind: sluice.KindRate, Subject: "global", Limit: 120, Window: time.Minute,
		Classes: []sluice.Class{{Name: "interactive", Weight: 3, Floor: 60}, {Name: "standard", Weight: 2, Floor: 30}, {Name: "batch", Weight: 1}}}
}

func inClass(class, key string) sluice.Request {
	return sluice.Request{Identity: sluice.Identity{Key: key, Workspace: key, Class: class}}
}

// shareOf returns what r's admission says of its class rule.
func shareOf(t *testing.T, r *sluice.Reservation) sluice.ClassShare {
	t.Helper()
	cs := r.Result().Classes
	if len(cs) != 1 {
		t.Fatalf("result names %d class rules, want 1: %+v", len(cs), cs)
	}
	return cs[0]
}

func TestClasses_SharesSplitFloorsThenWeights(t *testing.T) {
	for _, tc := range []struct {
		rule sluice.Rule
		want map[string]int64
	}{
		{modelCalls(), map[string]int64{"interactive": 7, "standard": 4, "batch": 1}},
		{classRate(), map[string]int64{"interactive": 75, "standard": 40, "batch": 5}},
	} {
		l, _ := withRules(t, tc.rule)
		for class, want := range tc.want {
			r := admit(t, l, inClass(class, "k"))
			if got := shareOf(t, r); got.Class != class || got.Share != want || got.Capacity != tc.rule.Limit || got.BorrowedFrom != "" {
				t.Errorf("%s: %+v, want share %d of %d, its own", tc.rule.Name, got, want, tc.rule.Limit)
			}
			settle(t, r, sluice.Usage{})
		}
	}
}

func TestClasses_UnnamedOrUnknownClassIsTheDefault(t *testing.T) {
	l, _ := withRules(t, modelCalls())
	for _, class := range []string{"", "premium"} {
		if got := shareOf(t, admit(t, l, inClass(class, "k"))); got.Class != "standard" {
			t.Errorf("class %q counted as %q, want the default, standard", class, got.Class)
		}
	}
	rule := modelCalls()
	rule.DefaultClass = ""
	l, _ = withRules(t, rule)
	if got := shareOf(t, admit(t, l, inClass("", "k"))); got.Class != "batch" {
		t.Errorf("without default_class counted as %q, want the last class", got.Class)
	}
}

// A class alone reaches the whole capacity: its share, then the idle
// shares of the others.
func TestClasses_LoneClassUsesWholeCapacity(t *testing.T) {
	t.Run("concurrency", func(t *testing.T) {
		l, _ := withRules(t, modelCalls())
		from := map[string]int{}
		for i := range 12 {
			r, err := l.Admit(context.Background(), inClass("batch", "k"))
			if err != nil {
				t.Fatalf("call %d of 12: %v", i+1, err)
			}
			from[shareOf(t, r).BorrowedFrom]++
		}
		if want := map[string]int{"": 1, "standard": 4, "interactive": 7}; fmt.Sprint(from) != fmt.Sprint(want) {
			t.Errorf("admitted from %v, want %v", from, want)
		}
		refuse(t, l, inClass("batch", "k"), sluice.ErrBusy)
	})
	t.Run("rate", func(t *testing.T) {
		l, clock := withRules(t, classRate())
		admitted := 0
		const minutes = 10
		for range minutes * 60 {
			admitted += admitN(t, l, inClass("batch", "k"), 1000)
			clock.Advance(time.Second)
		}
		if capacity := minutes * 120; admitted < capacity*95/100 {
			t.Errorf("a lone class was admitted %d times in %d minutes, want at least 95%% of %d", admitted, minutes, capacity)
		}
	})
}

// Every class asking all the time: each gets its share (at least its
// floor), within 5 %, and no more.
func TestClasses_ContentionGivesEachClassItsShare(t *testing.T) {
	classes := []string{"interactive", "standard", "batch"}
	shares := map[string]int{"interactive": 75, "standard": 40, "batch": 5}
	floors := map[string]int{"interactive": 60, "standard": 30, "batch": 0}
	t.Run("rate", func(t *testing.T) {
		l, clock := withRules(t, classRate())
		admitted := map[string]int{}
		const minutes = 20
		for step := range minutes * 60 {
			// Each second, every class asks three times, in turn, starting
			// with another class each second.
			for i := range 3 * len(classes) {
				class := classes[(step+i)%len(classes)]
				if _, err := l.Admit(context.Background(), inClass(class, "k-"+class)); err == nil {
					admitted[class]++
				} else if !errors.Is(err, sluice.ErrRateLimited) {
					t.Fatal(err)
				}
			}
			clock.Advance(time.Second)
		}
		for _, class := range classes {
			got, want := float64(admitted[class])/minutes, float64(shares[class])
			if got < want-0.05*120 || got > want+0.05*120 || got < float64(floors[class])*0.95 {
				t.Errorf("%s: %.1f a minute, want its share %v (floor %d) within 5%% of 120", class, got, want, floors[class])
			}
		}
	})
	t.Run("concurrency", func(t *testing.T) {
		l, clock := withRules(t, modelCalls())
		want := map[string]int{"interactive": 7, "standard": 4, "batch": 1}
		type call struct {
			r     *sluice.Reservation
			class string
			ends  time.Time
		}
		var running []call
		held := map[string]int{}
		var sum map[string]int
		const steps = 2000
		for step := range steps {
			// Calls last 1 to 4 seconds; each class asks four times a
			// second, more than its share can hold.
			kept := running[:0]
			for _, c := range running {
				if !clock.Now().Before(c.ends) {
					settle(t, c.r, sluice.Usage{})
					held[c.class]--
					continue
				}
				kept = append(kept, c)
			}
			running = kept
			for i := range 4 * len(classes) {
				class := classes[(step+i)%len(classes)]
				r, err := l.Admit(context.Background(), inClass(class, "k-"+class))
				if errors.Is(err, sluice.ErrBusy) {
					continue
				} else if err != nil {
					t.Fatal(err)
				}
				running = append(running, call{r, class, clock.Now().Add(time.Duration(1+(step+i)%4) * time.Second)})
				held[class]++
			}
			if step == steps/2 {
				sum = map[string]int{}
			}
			if sum != nil {
				for class, n := range held {
					sum[class] += n
				}
			}
			clock.Advance(time.Second)
		}
		for _, class := range classes {
			got := float64(sum[class]) / (steps / 2)
			if w := float64(want[class]); got < w-0.05*12 || got > w+0.05*12 {
				t.Errorf("%s: %.2f calls in flight on average, want its share %v within 5%% of 12", class, got, w)
			}
		}
	})
}

// Once the owner of a lent share asks, borrowers are refused at once; the
// borrowed calls are not cut, and the owner gets its share back as they
// end.
func TestClasses_BorrowingStopsOnceOwnerAsks(t *testing.T) {
	t.Run("concurrency", func(t *testing.T) {
		l, _ := withRules(t, modelCalls())
		var inInteractive []*sluice.Reservation
		for range 12 {
			r := admit(t, l, inClass("batch", "k"))
			if shareOf(t, r).BorrowedFrom == "interactive" {
				inInteractive = append(inInteractive, r)
			}
		}
		err := refuse(t, l, inClass("interactive", "i"), sluice.ErrBusy)
		var busy *sluice.BusyError
		if !errors.As(err, &busy) || busy.Class == nil || busy.Class.Class != "interactive" || busy.Class.Floor != 6 || busy.Class.Share != 7 {
			t.Fatalf("refusal %#v, want one naming class interactive, floor 6, share 7", err)
		}
		if msg := err.Error(); !strings.Contains(msg, `class "interactive" (floor 6, share 7 of 12`) {
			t.Errorf("message %q does not name the class, its floor and share", msg)
		}
		for _, r := range inInteractive {
			settle(t, r, sluice.Usage{})
			refuse(t, l, inClass("batch", "k"), sluice.ErrBusy)
			if got := shareOf(t, admit(t, l, inClass("interactive", "i"))); got.BorrowedFrom != "" {
				t.Fatalf("interactive admitted from %q, want its own share", got.BorrowedFrom)
			}
		}
	})
	t.Run("rate", func(t *testing.T) {
		l, clock := withRules(t, classRate())
		if n := admitN(t, l, inClass("batch", "k"), 1000); n != 120 {
			t.Fatalf("a lone class was admitted %d times, want the whole 120", n)
		}
		refuse(t, l, inClass("interactive", "i"), sluice.ErrRateLimited)
		// Twelve seconds refill 15 of interactive's 75, 8 of standard's 40
		// and 1 of batch's 5. Standard has not asked: its refill is lent.
		clock.Advance(12 * time.Second)
		if n := admitN(t, l, inClass("batch", "k"), 1000); n != 1+8 {
			t.Errorf("batch was admitted %d times, want its own 1 and standard's 8: interactive's refill is no longer lent", n)
		}
		if n := admitN(t, l, inClass("interactive", "i"), 1000); n != 15 {
			t.Errorf("interactive was admitted %d times, want its 15", n)
		}
	})
}

// A waiter whose share is lent out is admitted as soon as one call in its
// share ends, though the borrower asks again first.
func TestClasses_WaiterForItsShareDoesNotStarve(t *testing.T) {
	l, clock := withRules(t, modelCalls())
	var inInteractive []*sluice.Reservation
	for range 12 {
		if r := admit(t, l, inClass("batch", "k")); shareOf(t, r).BorrowedFrom == "interactive" {
			inInteractive = append(inInteractive, r)
		}
	}
	req := inClass("interactive", "i")
	req.MaxWait = time.Hour
	done := admitAsync(context.Background(), l, req)
	waitTimers(t, clock, headTimers)
	settle(t, inInteractive[0], sluice.Usage{})
	refuse(t, l, inClass("batch", "k"), sluice.ErrBusy)
	o := result(t, done)
	if o.err != nil {
		t.Fatal(o.err)
	}
	if from := shareOf(t, o.r).BorrowedFrom; from != "" {
		t.Errorf("the waiter was admitted from %q, want its own share", from)
	}
}

// Within a class, waiters are served by tenant, not first come: tenant b's
// one call is served second, not behind tenant a's four.
func TestClasses_QueueFairAcrossTenantsWithinClass(t *testing.T) {
	rule := sluice.Rule{Name: "two", Kind: sluice.KindConcurrency, Subject: "global", Limit: 2,
		Classes: []sluice.Class{{Name: "interactive", Floor: 1}, {Name: "batch", Floor: 1}}}
	servedFairly(t, rule, func(r *sluice.Request) { r.Identity.Class = "batch" }, func(l *sluice.Limiter) {
		// Interactive holds its share, which batch would otherwise borrow.
		admit(t, l, inClass("interactive", "i"))
	})
}

func TestClasses_InvalidRules(t *testing.T) {
	valid := modelCalls()
	for _, tc := range []struct {
		name  string
		edit  func(r *sluice.Rule)
		field string
		msg   string
	}{
		{"budget", func(r *sluice.Rule) { r.Kind, r.Period = sluice.KindBudget, sluice.PeriodDay }, "classes", "not budgets"},
		{"floors over the limit", func(r *sluice.Rule) { r.Classes[2].Floor = 4 }, "classes", "more than the limit"},
		{"negative floor", func(r *sluice.Rule) { r.Classes[2].Floor = -1 }, "classes", "floor must be between"},
		{"negative weight", func(r *sluice.Rule) { r.Classes[1].Weight = -2 }, "classes", "weight"},
		{"no name", func(r *sluice.Rule) { r.Classes[1].Name = "" }, "classes", "no name"},
		{"twice", func(r *sluice.Rule) { r.Classes[1].Name = "batch" }, "classes", "twice"},
		{"unknown default", func(r *sluice.Rule) { r.DefaultClass = "premium" }, "default_class", "not one of"},
		{"default without classes", func(r *sluice.Rule) { r.Classes = nil }, "default_class", "no classes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := valid
			r.Classes = append([]sluice.Class(nil), valid.Classes...)
			tc.edit(&r)
			var re *sluice.RuleError
			if err := r.Validate(); !errors.As(err, &re) || re.Field != tc.field || !strings.Contains(re.Message, tc.msg) {
				t.Fatalf("got %v, want a rule error on %s saying %q", err, tc.field, tc.msg)
			}
		})
	}
	if err := valid.Validate(); err != nil {
		t.Fatalf("the example: %v", err)
	}
}

// A request that fits the largest share is not too large, though it is
// larger than its own class's share.
func TestClasses_TooLargeOnlyPastTheLargestShare(t *testing.T) {
	rule := sluice.Rule{Name: "tpm", Kind: sluice.KindRate, Subject: "global", Metric: sluice.MetricTokens, Limit: 1000, Window: time.Minute,
		Classes: []sluice.Class{{Name: "interactive", Floor: 800}, {Name: "batch"}}}
	l, _ := withRules(t, rule)
	r := admit(t, l, sluice.Request{Identity: sluice.Identity{Key: "k", Class: "batch"}, Max: sluice.Usage{InputTokens: 500}})
	if got := shareOf(t, r); got.BorrowedFrom != "interactive" || got.Share != 100 {
		t.Errorf("%+v, want batch's share of 100, borrowing interactive's", got)
	}
	err := refuse(t, l, sluice.Request{Identity: sluice.Identity{Key: "k", Class: "batch"}, Max: sluice.Usage{InputTokens: 901}}, sluice.ErrTooLarge)
	var tl *sluice.TooLargeError
	if !errors.As(err, &tl) || tl.Limit != 900 {
		t.Errorf("%v, want too large for the largest share, 900", err)
	}
}

// signalDownStore fails the admissions that signal a class's demand (a
// budget charge of one), and serves the others.
type signalDownStore struct{ sluice.Store }

func (s signalDownStore) Admit(ctx context.Context, now time.Time, b sluice.Batch, results []sluice.ChargeResult) (bool, error) {
	for _, c := range b.Charges {
		if c.Kind == sluice.KindBudget && c.Amount == 1 {
			return false, errors.New("connection reset")
		}
	}
	return s.Store.Admit(ctx, now, b, results)
}

// A demand signal the store fails is the refusal's store error, with its
// cause: the class's claim on its share was not recorded.
func TestClasses_FailedDemandSignalIsStoreError(t *testing.T) {
	rule := sluice.Rule{Name: "two", Kind: sluice.KindConcurrency, Subject: "global", Limit: 2,
		Classes: []sluice.Class{{Name: "interactive", Floor: 1}, {Name: "batch", Floor: 1}}}
	l, _ := newLimiter(t, sluice.Options{Store: signalDownStore{memstore.New(memstore.Options{})}, Rules: []sluice.Rule{rule}})
	held := admit(t, l, inClass("interactive", "i"))
	admit(t, l, inClass("batch", "b"))
	_, err := l.Admit(context.Background(), inClass("interactive", "i"))
	if !errors.Is(err, sluice.ErrStoreUnavailable) || !strings.Contains(err.Error(), "connection reset") {
		t.Fatalf("got %v, want store unavailable naming its cause", err)
	}
	settle(t, held, sluice.Usage{})
	admit(t, l, inClass("interactive", "i"))
}
