package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/redisstore"
)

// The replica tests re-run this binary as child processes; childEnv names
// the child's role, the others its store.
const (
	childEnv       = "SLUICE_REDISSTORE_CHILD"
	childURLEnv    = "SLUICE_REDISSTORE_CHILD_URL"
	childPrefixEnv = "SLUICE_REDISSTORE_CHILD_PREFIX"
	childStartEnv  = "SLUICE_REDISSTORE_CHILD_START"
)

// The rules the replicas share, each on its own subject.
var (
	replicaBudget = sluice.Rule{Name: "daily", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens,
		Limit: 1000, Period: sluice.PeriodDay}
	replicaRate = sluice.Rule{Name: "rph", Kind: sluice.KindRate, Subject: "key", Limit: 50, Window: time.Hour}
	replicaCap  = sluice.Rule{Name: "inflight", Kind: sluice.KindConcurrency, Subject: "key", Limit: 4}

	budgetID = sluice.Identity{Workspace: "budget-ws", Key: "budget-key"}
	rateID   = sluice.Identity{Workspace: "rate-ws", Key: "rate-key"}
	capID    = sluice.Identity{Workspace: "cap-ws", Key: "cap-key"}

	// The holder's rules: a lease and two budget reservations per request,
	// with a deadline holderTimeout out.
	holderCap     = sluice.Rule{Name: "inflight", Kind: sluice.KindConcurrency, Subject: "key", Limit: 3}
	holderCharge  = sluice.Rule{Name: "daily", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 10_000, Period: sluice.PeriodDay}
	holderRelease = sluice.Rule{Name: "daily_release", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 10_000, Period: sluice.PeriodDay, OnExpiry: sluice.ExpiryRelease}
	holderID      = sluice.Identity{Workspace: "hold-ws", Key: "hold-key"}
)

// holderTimeout is the model timeout of the holder's requests.
const holderTimeout = 2 * time.Second

func replicaLimiter(s sluice.Store, timeout time.Duration, rules ...sluice.Rule) (*sluice.Limiter, error) {
	return sluice.New(sluice.Options{Store: s, Rules: rules, DefaultTimeout: timeout, ExpirySlack: time.Millisecond})
}

func runChild(role string) int {
	ctx := context.Background()
	url, prefix := os.Getenv(childURLEnv), os.Getenv(childPrefixEnv)
	s, err := redisstore.Open(ctx, redisstore.Options{URL: url, Prefix: prefix, Timeout: 2 * testTimeout})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer s.Close()
	switch role {
	case "hammer":
		err = hammer(ctx, s, url, prefix)
	case "holder":
		err = hold(ctx, s)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	return 0
}

// hammer admits against the budget, the rate and the concurrency rule from
// 8 goroutines each, starting at the time the parent gave, and prints what
// it was admitted and the most leases it saw held across every process.
func hammer(ctx context.Context, s sluice.Store, url, prefix string) error {
	budget, err := replicaLimiter(s, time.Minute, replicaBudget)
	if err != nil {
		return err
	}
	rate, err := replicaLimiter(s, time.Minute, replicaRate)
	if err != nil {
		return err
	}
	capped, err := replicaLimiter(s, time.Minute, replicaCap)
	if err != nil {
		return err
	}
	raw, err := redisstore.RawClient(url)
	if err != nil {
		return err
	}
	defer raw.Close()
	heldKey := prefix + ":held"

	start, _ := strconv.ParseInt(os.Getenv(childStartEnv), 10, 64)
	time.Sleep(time.Until(time.Unix(0, start)))

	var budgetN, rateN, capN, most atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	fail := func(err error) {
		if err != nil && !errors.Is(err, sluice.ErrBudgetExhausted) && !errors.Is(err, sluice.ErrRateLimited) && !errors.Is(err, sluice.ErrBusy) {
			failed.Store(err)
		}
	}
	for range 8 {
		wg.Go(func() {
			for range 40 {
				r, err := budget.Admit(ctx, sluice.Request{Identity: budgetID, Max: sluice.Usage{InputTokens: 10, OutputTokens: 20}})
				if err != nil {
					fail(err)
					continue
				}
				budgetN.Add(1)
				fail(r.Settle(ctx, sluice.Usage{InputTokens: 10, OutputTokens: 20}))
			}
		})
		wg.Go(func() {
			for range 40 {
				if _, err := rate.Admit(ctx, sluice.Request{Identity: rateID}); err != nil {
					fail(err)
					continue
				}
				rateN.Add(1)
			}
		})
		wg.Go(func() {
			for end := time.Now().Add(time.Second); time.Now().Before(end); {
				r, err := capped.Admit(ctx, sluice.Request{Identity: capID})
				if err != nil {
					fail(err)
					time.Sleep(time.Millisecond)
					continue
				}
				capN.Add(1)
				held, err := raw.Do(ctx, raw.B().Incr().Key(heldKey).Build()).AsInt64()
				if err != nil {
					failed.Store(err)
					return
				}
				for m := most.Load(); held > m && !most.CompareAndSwap(m, held); m = most.Load() {
				}
				time.Sleep(2 * time.Millisecond)
				if err := raw.Do(ctx, raw.B().Decr().Key(heldKey).Build()).Error(); err != nil {
					failed.Store(err)
					return
				}
				fail(r.Settle(ctx, sluice.Usage{}))
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return err
	}
	fmt.Printf("budget=%d rate=%d capped=%d most=%d\n", budgetN.Load(), rateN.Load(), capN.Load(), most.Load())
	return nil
}

// hold admits three requests, each holding a lease and two budget
// reservations of 100 tokens, prints "held" and waits to be killed.
func hold(ctx context.Context, s sluice.Store) error {
	l, err := replicaLimiter(s, holderTimeout, holderCap, holderCharge, holderRelease)
	if err != nil {
		return err
	}
	for range 3 {
		if _, err := l.Admit(ctx, sluice.Request{Identity: holderID, Max: sluice.Usage{InputTokens: 100}}); err != nil {
			return err
		}
	}
	fmt.Println("held")
	select {}
}

var _ rueidis.Client
