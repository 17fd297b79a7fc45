package memstore

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/internal/inproc"
)

// leaseIDs returns the ids of c's leases, sorted, and checks the rules of
// their keeping: a list only beside an inline lease, never empty.
func leaseIDs(t *testing.T, sh *shard, c *counter) []uint64 {
	t.Helper()
	var ids []uint64
	if c.inl {
		ids = append(ids, c.inline().id)
	}
	if c.lease != 0 {
		ls := sh.leases[c.lease-1]
		if !c.inl || len(ls) == 0 {
			t.Fatalf("out-of-line list of %d leases, inline held %v", len(ls), c.inl)
		}
		for _, l := range ls {
			ids = append(ids, l.id)
		}
	}
	slices.Sort(ids)
	return ids
}

func concurrencyCounter(sh *shard) *counter {
	var k subjectKey
	k.a = uint64(sh.used)
	i := sh.add(k, noSlot, 1, 0)
	c := &sh.at(i).counter
	sh.claim(c, inproc.Concurrency)
	return c
}

// Two and three live leases on one counter, freed in every order: the
// first is inline, the others out of line, and the counter ends with
// neither.
func TestLeasesFreedInEveryOrder(t *testing.T) {
	for _, n := range []int{1, 2, 3} {
		ids := make([]uint64, n)
		for i := range ids {
			ids[i] = uint64(i + 1)
		}
		for _, order := range permutations(ids) {
			t.Run(fmt.Sprint(n, order), func(t *testing.T) {
				var sh shard
				sh.init()
				c := concurrencyCounter(&sh)
				for _, id := range ids {
					sh.addLease(c, lease{id: id, expiry: 100})
				}
				if got := leaseIDs(t, &sh, c); !slices.Equal(got, ids) {
					t.Fatalf("leases %v, want %v", got, ids)
				}
				if (c.lease != 0) != (n > 1) {
					t.Fatalf("%d leases, out-of-line list %d", n, c.lease)
				}
				left := slices.Clone(ids)
				for _, id := range order {
					sh.dropLease(c, id)
					left = slices.DeleteFunc(left, func(x uint64) bool { return x == id })
					if got := leaseIDs(t, &sh, c); !slices.Equal(got, left) {
						t.Fatalf("after freeing %d: leases %v, want %v", id, got, left)
					}
					if held, _ := sh.heldLeases(c); held != int64(len(left)) || sh.liveLeases(c, 50) != len(left) {
						t.Fatalf("after freeing %d: held %d, live %d, want %d", id, held, sh.liveLeases(c, 50), len(left))
					}
				}
				if c.inl || c.lease != 0 {
					t.Fatalf("all freed, yet inline %v, list %d", c.inl, c.lease)
				}
				// An unknown id frees nothing.
				sh.addLease(c, lease{id: 7, expiry: 100})
				sh.dropLease(c, 8)
				if got := leaseIDs(t, &sh, c); !slices.Equal(got, []uint64{7}) {
					t.Fatalf("leases %v after freeing an unknown id", got)
				}
			})
		}
	}
}

func permutations(xs []uint64) [][]uint64 {
	if len(xs) <= 1 {
		return [][]uint64{slices.Clone(xs)}
	}
	var out [][]uint64
	for i := range xs {
		rest := slices.Concat(xs[:i], xs[i+1:])
		for _, p := range permutations(rest) {
			out = append(out, append([]uint64{xs[i]}, p...))
		}
	}
	return out
}

// Expired leases free their place without being settled, inline or out
// of line, in every order of expiry; the survivors move inline.
func TestLeasesExpire(t *testing.T) {
	expiries := [][]int64{{10, 20, 30}, {30, 20, 10}, {20, 10, 30}, {10, 30, 20}, {20, 30, 10}, {30, 10, 20}, {10, 10, 20}, {20, 10, 10}}
	for _, exp := range expiries {
		t.Run(fmt.Sprint(exp), func(t *testing.T) {
			var sh shard
			sh.init()
			c := concurrencyCounter(&sh)
			for i, e := range exp {
				sh.addLease(c, lease{id: uint64(i + 1), expiry: e})
			}
			for _, now := range []int64{5, 10, 15, 20, 25, 30} {
				var want []uint64
				earliest := int64(0)
				for i, e := range exp {
					if e > now {
						want = append(want, uint64(i+1))
						if earliest == 0 || e < earliest {
							earliest = e
						}
					}
				}
				if live := sh.liveLeases(c, now); live != len(want) {
					t.Fatalf("at %d: %d live before dropping, want %d", now, live, len(want))
				}
				ch := inproc.Charge{Kind: inproc.Concurrency, Limit: 3}
				sh.checkConcurrency(c, &ch, now)
				if got := leaseIDs(t, &sh, c); !slices.Equal(got, want) {
					t.Fatalf("at %d: leases %v, want %v", now, got, want)
				}
				if ch.Allowed != (len(want) < 3) || ch.ResetAt != earliest {
					t.Fatalf("at %d: allowed %v, reset %d; want %v, %d", now, ch.Allowed, ch.ResetAt, len(want) < 3, earliest)
				}
				if len(want) == 3 && ch.RetryAfter != earliest-now {
					t.Fatalf("at %d: retry after %d, want %d", now, ch.RetryAfter, earliest-now)
				}
			}
			if c.inl || c.lease != 0 || !sh.idle(c, 30, 0) {
				t.Fatalf("all expired, yet inline %v, list %d, idle %v", c.inl, c.lease, sh.idle(c, 30, 0))
			}
		})
	}
}

// A counter holding a lease is not idle until the lease expires, whether
// it is inline or out of line; eviction gives its list back.
func TestLeasesKeepCounter(t *testing.T) {
	var sh shard
	sh.init()
	c := concurrencyCounter(&sh)
	sh.addLease(c, lease{id: 1, expiry: 10})
	sh.addLease(c, lease{id: 2, expiry: 20})
	if sh.idle(c, 15, 0) {
		t.Fatal("idle with a live lease out of line")
	}
	sh.dropLease(c, 2)
	if sh.idle(c, 5, 0) || !sh.idle(c, 10, 0) {
		t.Fatal("inline lease: idle before its expiry, or not after")
	}
	sh.addLease(c, lease{id: 3, expiry: 20})
	j := c.lease
	sh.release(sh.subjects.get(subjectKey{}))
	if len(sh.freeLeases) != 1 || sh.freeLeases[0] != j-1 || len(sh.leases[j-1]) != 0 {
		t.Fatalf("release kept the list: free %v", sh.freeLeases)
	}
}

// Random adds, frees and expiries on a few counters of one shard agree
// with a plain list of leases per counter.
func TestLeasesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var sh shard
	sh.init()
	const counters = 4
	var cs [counters]*counter
	var model [counters][]lease
	for i := range cs {
		cs[i] = concurrencyCounter(&sh)
	}
	now, id := int64(0), uint64(0)
	for step := range 20000 {
		k := rng.IntN(counters)
		c := cs[k]
		switch op := rng.IntN(10); {
		case op < 4:
			id++
			l := lease{id: id, expiry: now + 1 + rng.Int64N(20)}
			sh.addLease(c, l)
			model[k] = append(model[k], l)
		case op < 7:
			if len(model[k]) == 0 {
				continue
			}
			l := model[k][rng.IntN(len(model[k]))]
			sh.dropLease(c, l.id)
			model[k] = slices.DeleteFunc(model[k], func(x lease) bool { return x.id == l.id })
		case op < 9:
			now += rng.Int64N(5)
			sh.dropExpired(c, now)
			model[k] = slices.DeleteFunc(model[k], func(x lease) bool { return x.expiry <= now })
		default:
			live := 0
			for _, l := range model[k] {
				if l.expiry > now {
					live++
				}
			}
			if got := sh.liveLeases(c, now); got != live {
				t.Fatalf("step %d: %d live, want %d", step, got, live)
			}
		}
		var want []uint64
		for _, l := range model[k] {
			want = append(want, l.id)
		}
		slices.Sort(want)
		if got := leaseIDs(t, &sh, c); !slices.Equal(got, want) {
			t.Fatalf("step %d, counter %d: leases %v, want %v", step, k, got, want)
		}
	}
	if len(sh.leases) > counters {
		t.Fatalf("%d out-of-line lists for %d counters: lists not reused", len(sh.leases), counters)
	}
}
