package sluice

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/bits"
	"slices"
	"time"
)

// installClasses lets a Limiter admit the charges of class rules: each
// from its class's share, or from a share it may borrow. compileClasses
// (ruleFeatures) compiles a rule's classes.
func installClasses(l *Limiter, _ *Options) { l.hooks.admitClasses = l.admitClasses }

// The bounds of a rule's classes.
const (
	maxClasses     = 16
	maxClassWeight = 1_000_000
)

// classSet is a class rule's classes, compiled: its classRule.
type classSet struct {
	list []compiledClass
	// defaultClass is the index of the class of a request that names
	// none, or one the rule does not list.
	defaultClass int
	// shares are the classes' shares at the rule's own limit.
	shares []int64
	// demand is the rule of the demand markers: a budget in the class
	// rule's name, never reported in a Result.
	demand *compiledRule
	// period is how long a demand marker lasts: at least period, and at
	// most twice that, after the last refusal that set it.
	period time.Duration
}

type compiledClass struct {
	Class
	// share and demand are the Key.Rule of the class's share counter and
	// of its demand marker.
	share, demand uint64
}

// compileClasses validates c's classes and prepares them.
func compileClasses(c *compiledRule) error {
	r := &c.Rule
	bad := func(field, format string, args ...any) error {
		return &RuleError{Rule: r.Name, Field: field, Message: fmt.Sprintf(format, args...)}
	}
	if len(r.Classes) == 0 {
		if r.DefaultClass != "" {
			return bad("default_class", "names a class, but the rule has no classes")
		}
		return nil
	}
	if r.Kind == KindBudget {
		return bad("classes", "are for rate and concurrency rules, not budgets (a budget is a ceiling, not a capacity to share)")
	}
	if len(r.Classes) > maxClasses {
		return bad("classes", "at most %d, got %d", maxClasses, len(r.Classes))
	}
	// A demand marker outlives the owner's last refusal by one or two
	// periods, during which its share stays unlent even if the owner has
	// stopped asking. A rate's marker lasts its window (within 1 s to 1
	// minute), so that the owner's refill is its own; a concurrency
	// share's lasts a second, so that a class that stops asking lends its
	// share again at once (an owner that keeps asking renews its marker at
	// every refusal).
	set := &classSet{defaultClass: len(r.Classes) - 1, period: time.Second}
	if r.Kind == KindRate {
		set.period = min(max(r.Window.Truncate(time.Second), time.Second), time.Minute)
	}
	var floors int64
	for i, cl := range r.Classes {
		switch {
		case cl.Name == "":
			return bad("classes", "class %d has no name", i+1)
		case cl.Weight < 0 || cl.Weight > maxClassWeight:
			return bad("classes", "class %q: weight must be between 0 (meaning 1) and %d, got %d", cl.Name, maxClassWeight, cl.Weight)
		case cl.Floor < 0 || cl.Floor > CounterCeiling:
			return bad("classes", "class %q: floor must be between 0 and %d, got %d", cl.Name, int64(CounterCeiling), cl.Floor)
		case r.Limit > 0 && cl.Floor > r.Limit-floors:
			return bad("classes", "the floors add up to more than the limit (%d)", r.Limit)
		}
		for _, other := range r.Classes[:i] {
			if other.Name == cl.Name {
				return bad("classes", "class %q is listed twice", cl.Name)
			}
		}
		floors += cl.Floor
		cl.Weight = max(cl.Weight, 1)
		set.list = append(set.list, compiledClass{Class: cl, share: classKey(c.id, "share", cl.Name), demand: classKey(c.id, "demand", cl.Name)})
		if cl.Name == r.DefaultClass {
			set.defaultClass = i
		}
	}
	if r.DefaultClass != "" && set.list[set.defaultClass].Name != r.DefaultClass {
		return bad("default_class", "%q is not one of the rule's classes", r.DefaultClass)
	}
	set.shares = set.split(r.Limit)
	set.demand = &compiledRule{Rule: Rule{Name: r.Name, Kind: KindBudget, Subject: r.Subject, OnStoreError: r.OnStoreError},
		metric: MetricRequests, location: time.UTC, isDemand: true}
	c.classes = set
	return nil
}

// classKey derives the counter of one class of a rule.
func classKey(rule uint64, what, class string) uint64 {
	h := fnv.New64a()
	var b [8]byte
	for i := range b {
		b[i] = byte(rule >> (8 * i))
	}
	h.Write(b[:])
	h.Write([]byte(what))
	h.Write([]byte{0})
	h.Write([]byte(class))
	return h.Sum64()
}

// split divides capacity into the classes' shares: each class its floor
// (scaled down when a tier or an override makes the capacity smaller than
// the floors), then what is left by weight, the units left over by
// rounding going to the largest remainders (ties: to the smaller share,
// then to the class listed first).
func (s *classSet) split(capacity int64) []int64 {
	shares := make([]int64, len(s.list))
	var floors, weights int64
	for _, c := range s.list {
		floors += c.Floor
		weights += c.Weight
	}
	rest := capacity
	for i, c := range s.list {
		shares[i] = c.Floor
		if floors > capacity {
			shares[i] = mulDiv(c.Floor, capacity, floors)
		}
		rest -= shares[i]
	}
	remainders := make([]int64, len(s.list))
	left := rest
	for i, c := range s.list {
		hi, lo := bits.Mul64(uint64(rest), uint64(c.Weight))
		q, r := bits.Div64(hi, lo, uint64(weights))
		shares[i] += int64(q)
		remainders[i] = int64(r)
		left -= int64(q)
	}
	for ; left > 0; left-- {
		best := -1
		for i := range shares {
			if remainders[i] >= 0 && (best < 0 || remainders[i] > remainders[best] ||
				remainders[i] == remainders[best] && shares[i] < shares[best]) {
				best = i
			}
		}
		shares[best]++
		remainders[best] = -1
	}
	return shares
}

// mulDiv returns a*b/c for 0 <= a, b and a <= c.
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(q)
}

// classOf returns the index of class in s.
func (s *classSet) classOf(class string) int {
	for i := range s.list {
		if s.list[i].Name == class {
			return i
		}
	}
	return s.defaultClass
}

// sharesAt returns the shares of a capacity.
func (s *classSet) sharesAt(rule *compiledRule, capacity int64) []int64 {
	if capacity == rule.Limit {
		return s.shares
	}
	return s.split(capacity)
}

// classCharge turns c, the charge of a class rule for a request of class,
// into the charge of that class's share (or, when that share is empty, of
// the first share it may borrow), and returns the largest charge any share
// could admit.
func (s *classSet) classCharge(c charge, class string) int64 {
	shares := s.sharesAt(c.rule, c.Limit)
	c.capacity, c.burst, c.class = c.Limit, c.Burst, uint8(s.classOf(class)+1)
	c.from = c.class
	if shares[c.class-1] == 0 {
		nextLender(c)
	}
	c.setShare(shares)
	var most int64
	for _, share := range shares {
		most = max(most, c.shareBurst(share))
	}
	return most
}

// classes are the classes of c's rule, a class rule.
func (c charge) classes() *classSet { return c.rule.classes.(*classSet) }

// setShare points c at the share counter of class c.from.
func (c charge) setShare(shares []int64) {
	share := shares[c.from-1]
	c.Key.Rule = c.classes().list[c.from-1].share
	c.Limit, c.Burst = share, c.shareBurst(share)
}

// shareBurst is a share's bucket capacity: the rule's burst scaled as the
// share scales the limit (a burst of 0, the limit, giving the share).
func (c charge) shareBurst(share int64) int64 {
	if c.burst == 0 || c.Kind != KindRate {
		return share
	}
	return max(mulDiv(share, c.burst, c.capacity), min(share, 1))
}

// nextLender moves c to the next class whose share it may borrow, in a
// fixed order (the classes listed last lend first, so the first listed,
// the most important, find theirs free the most often); false when there
// is none left.
func nextLender(c charge) bool {
	s := c.classes()
	shares := s.sharesAt(c.rule, c.capacity)
	i := len(s.list)
	if c.from != c.class {
		i = int(c.from) - 1
	}
	for i--; i >= 0; i-- {
		if i != int(c.class)-1 && shares[i] > 0 {
			c.from = uint8(i + 1)
			c.setShare(shares)
			return true
		}
	}
	return false
}

// demandCharge is the charge that lets c borrow class c.from's share only
// while that class has not signalled demand: a budget of one that charges
// nothing, which a signal (signalDemand) has filled.
func demandCharge(c charge, now time.Time) (Charge, origin) {
	s := c.classes()
	start, end := demandPeriod(s.period, now, 0)
	return Charge{Key: CounterKey{Rule: s.list[c.from-1].demand, Subject: c.Key.Subject, Period: start},
		Kind: KindBudget, Limit: 1, PeriodEnd: end, Shadow: c.Shadow}, origin{rule: s.demand}
}

// truncate keeps the first n charges (a class batch's own, without the
// demand markers of an attempt).
func (cs *charges) truncate(n int) { cs.in, cs.out, cs.origins = cs.in[:n], cs.out[:n], cs.origins[:n] }

// demandPeriod returns the start (in Unix seconds) and the end of the
// period of length p that is ahead of now's by ahead periods.
func demandPeriod(p time.Duration, now time.Time, ahead int64) (int64, time.Time) {
	ns := now.UnixNano()
	start := ns - ns%int64(p) + ahead*int64(p)
	return start / int64(time.Second), time.Unix(0, start+int64(p))
}

// admitClasses admits r's batch, whose charges include class charges:
// each class charge draws its class's share, or else, in turn, the shares
// of the classes that signalled no demand, each attempt one atomic Admit
// of the whole batch. When every attempt is refused, the refusal is the
// first attempt's, and each class refused by its own share signals demand;
// a signal the store fails is the admission's *StoreError.
func (l *Limiter) admitClasses(ctx context.Context, now time.Time, r *Reservation) (bool, error) {
	base := len(r.charges.in)
	var first charges
	for {
		r.charges.truncate(base)
		for i := range base {
			if c := r.charges.at(i); c.class != 0 && c.from != c.class {
				r.charges.add(demandCharge(c, now))
			}
		}
		ok, err := l.store.Admit(ctx, now, r.batch(), r.charges.out)
		if err != nil || ok {
			if err != nil {
				r.charges.truncate(base)
			}
			return ok, err
		}
		if first.in == nil {
			first = refusedFirst(&r.charges, base, now)
		}
		if !borrowNext(&r.charges, base) {
			break
		}
	}
	r.charges = first
	if classRefusal(&first) {
		if err := l.signalDemand(ctx, now, &first); err != nil {
			return false, err
		}
	}
	return false, nil
}

// refusedFirst copies the charges of a refused first attempt, without its
// demand markers: a class charge that was refused because the class it
// borrows from (its own share being empty) signalled demand is refused
// until that signal's period ends.
func refusedFirst(cs *charges, base int, now time.Time) charges {
	first := cs.clone(base)
	marker := base
	for i := range base {
		c := first.at(i)
		if c.class == 0 || c.from == c.class {
			continue
		}
		if m := cs.at(marker); !m.Allowed && c.Allowed {
			c.Allowed, c.Remaining, c.ResetAt = false, 0, m.PeriodEnd
			c.RetryAfter = m.PeriodEnd.Sub(now)
		}
		marker++
	}
	return first
}

// clone returns a copy of the first n charges of cs: for the few charges
// of most batches, in one allocation rather than one for each slice.
func (cs *charges) clone(n int) charges {
	if n > 3 {
		return charges{slices.Clone(cs.in[:n]), slices.Clone(cs.out[:n]), slices.Clone(cs.origins[:n])}
	}
	b := new(struct {
		in      [3]Charge
		out     [3]ChargeResult
		origins [3]origin
	})
	return charges{append(b.in[:0], cs.in[:n]...), append(b.out[:0], cs.out[:n]...), append(b.origins[:0], cs.origins[:n]...)}
}

// borrowNext moves every class charge that was refused (it, or the demand
// marker of the share it borrowed) to its next lender; false when the
// batch cannot be admitted by borrowing: a charge of another rule refused,
// or a class charge has no lender left.
func borrowNext(cs *charges, base int) bool {
	if !classRefusal(cs) {
		return false
	}
	marker := base
	for i := range base {
		c := cs.at(i)
		if c.class == 0 {
			continue
		}
		refused := !c.Allowed && !c.Shadow
		if c.from != c.class {
			refused = refused || !cs.out[marker].Allowed && !c.Shadow
			marker++
		}
		if refused && !nextLender(c) {
			return false
		}
	}
	return true
}

// classRefusal reports whether every enforced charge refused is a class
// charge or a demand marker: borrowing another share may admit the batch.
func classRefusal(cs *charges) bool {
	for i := range cs.in {
		if c := cs.at(i); !c.Allowed && !c.Shadow && c.class == 0 && !c.rule.isDemand {
			return false
		}
	}
	return true
}

// maxSignals is the limit of a demand marker in its period of signals: it
// counts the signals of one period, one or a few (see signalDemand), and
// stays within what every store computes exactly.
const maxSignals = 1 << 20

// signalDemand records, for each class refused by its own share, that the
// class asks for it: borrowers of the share are refused until the end of
// the next demand period. The marker of this period and of the next are
// set together, so a signal lasts at least one whole period; a batch that
// finds the next period's set already charges nothing.
func (l *Limiter) signalDemand(ctx context.Context, now time.Time, first *charges) error {
	b := Batch{ID: l.nextID.Add(1)}
	for i := range first.in {
		c := first.at(i)
		if c.class == 0 || c.from != c.class || c.Allowed || c.Shadow {
			continue
		}
		s := c.classes()
		for ahead := range int64(2) {
			start, end := demandPeriod(s.period, now, ahead)
			b.Charges = append(b.Charges, Charge{Key: CounterKey{Rule: s.list[c.class-1].demand, Subject: c.Key.Subject, Period: start},
				Kind: KindBudget, Limit: max(1, maxSignals*(1-ahead)), Amount: 1, Actual: 1, PeriodEnd: end})
			b.Deadline = end
		}
	}
	if len(b.Charges) == 0 {
		return nil
	}
	ok, err := l.store.Admit(ctx, now, b, make([]ChargeResult, len(b.Charges)))
	if err == nil && ok {
		err = l.store.Settle(ctx, now, b)
	}
	if err != nil {
		return &StoreError{Op: "signal class demand", Err: err}
	}
	return nil
}

// shareOf describes c, a class charge of s's rule.
func (s *classSet) shareOf(c charge) *ClassShare {
	own := &s.list[c.class-1]
	cs := &ClassShare{Rule: c.rule.Name, Class: own.Name, Floor: own.Floor,
		Share: s.sharesAt(c.rule, c.capacity)[c.class-1], Capacity: c.capacity}
	if c.from != c.class {
		cs.BorrowedFrom = s.list[c.from-1].Name
	}
	return cs
}
