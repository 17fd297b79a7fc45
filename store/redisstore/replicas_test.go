package redisstore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/redisstore"
)

// child starts this test binary as a replica with role on the store at url.
func child(t *testing.T, role, url, prefix string, start time.Time) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+role, childURLEnv+"="+url, childPrefixEnv+"="+prefix,
		childStartEnv+"="+strconv.FormatInt(start.UnixNano(), 10))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

func replicaURLs(t *testing.T) []struct{ name, url string } {
	return []struct{ name, url string }{{"standalone", redisURL(t)}, {"cluster", clusterURL(t)}}
}

// TestReplicas_ThreeProcessesHoldLimits hammers one subject per rule from
// three OS processes through the same Redis: the worst-case budget admits
// exactly what fits, the rate rule exactly its burst, and the concurrency
// cap is never exceeded. Real time, no pinned clock.
func TestReplicas_ThreeProcessesHoldLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range replicaURLs(t) {
		t.Run(tc.name, func(t *testing.T) {
			prefix := freePrefixFor(t, tc.url)
			day, _ := sluice.PeriodBounds(sluice.PeriodDay, time.Now(), time.UTC)
			start := time.Now().Add(500 * time.Millisecond)
			var (
				wg                         sync.WaitGroup
				mu                         sync.Mutex
				budget, rate, capped, most int64
				errs                       []error
			)
			for i := range 3 {
				cmd := child(t, "hammer", tc.url, prefix, start)
				wg.Go(func() {
					out, err := cmd.Output()
					var b, r, c, m int64
					if err == nil {
						_, err = fmt.Sscanf(string(out), "budget=%d rate=%d capped=%d most=%d", &b, &r, &c, &m)
					}
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						errs = append(errs, fmt.Errorf("replica %d: %v: %s", i, err, out))
						return
					}
					budget, rate, capped, most = budget+b, rate+r, capped+c, max(most, m)
				})
			}
			wg.Wait()
			if len(errs) > 0 {
				t.Fatal(errors.Join(errs...))
			}
			if now, _ := sluice.PeriodBounds(sluice.PeriodDay, time.Now(), time.UTC); !now.Equal(day) {
				t.Skip("the day changed during the run")
			}
			t.Logf("admitted: budget %d, rate %d, capped %d; most held at once %d", budget, rate, capped, most)
			if budget != 33 {
				t.Errorf("budget of 1000 tokens admitted %d requests of 30, want exactly 33", budget)
			}
			if rate != 50 {
				t.Errorf("rate of 50 per hour admitted %d, want exactly its burst of 50", rate)
			}
			if most > 4 || most < 1 || capped == 0 {
				t.Errorf("concurrency cap 4: most held %d over %d admissions", most, capped)
			}
			s := openStore(t, redisstore.Options{URL: tc.url, Prefix: prefix})
			l, err := replicaLimiter(s, time.Minute, replicaBudget)
			if err != nil {
				t.Fatal(err)
			}
			eff, err := l.Effective(context.Background(), budgetID)
			if err != nil || len(eff) != 1 || eff[0].Used != 990 {
				t.Fatalf("budget after settling 33 x 30: %+v %v, want 990 used", eff, err)
			}
		})
	}
}

// TestReplicas_KillNineFreesLeasesAndSweepsOnce kills a process holding
// leases and budget reservations: its slots free at the lease deadline, and
// three replicas sweeping at once settle each reservation exactly once.
func TestReplicas_KillNineFreesLeasesAndSweepsOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range replicaURLs(t) {
		t.Run(tc.name, func(t *testing.T) {
			prefix := freePrefixFor(t, tc.url)
			ctx := context.Background()
			// The replicas are ready before the holder starts, so that its
			// leases are checked well before they expire.
			var replicas []*sluice.Limiter
			for range 3 {
				s := openStore(t, redisstore.Options{URL: tc.url, Prefix: prefix})
				l, err := replicaLimiter(s, holderTimeout, holderCap, holderCharge, holderRelease)
				if err != nil {
					t.Fatal(err)
				}
				replicas = append(replicas, l)
			}
			cmd := child(t, "holder", tc.url, prefix, time.Now())
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			admittedBy := time.Now()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			held := make(chan bool, 1)
			go func() {
				sc := bufio.NewScanner(stdout)
				held <- sc.Scan() && sc.Text() == "held"
			}()
			select {
			case ok := <-held:
				if !ok {
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
					t.Fatal("the holder failed before holding its reservations")
				}
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatal("the holder never held its reservations")
			}
			heldAt := time.Now()
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()

			l := replicas[0]
			req := sluice.Request{Identity: holderID, Max: sluice.Usage{InputTokens: 100}}
			if time.Since(admittedBy) < holderTimeout {
				if _, err := l.Admit(ctx, req); !errors.Is(err, sluice.ErrBusy) {
					t.Fatalf("admission while the dead holder's leases live: %v, want busy", err)
				}
			} else {
				t.Log("the machine is too slow to check the leases before they expire")
			}
			// The holder's deadline is its timeout (and a millisecond) after
			// its admissions, which were before heldAt.
			time.Sleep(time.Until(heldAt.Add(holderTimeout + 100*time.Millisecond)))

			var wg sync.WaitGroup
			results := make([]sluice.SweepResult, len(replicas))
			sweepErrs := make([]error, len(replicas))
			for i, r := range replicas {
				wg.Go(func() { results[i], sweepErrs[i] = r.Sweep(ctx) })
			}
			wg.Wait()
			var total sluice.SweepResult
			for i, res := range results {
				if sweepErrs[i] != nil {
					t.Fatalf("sweep %d: %v", i, sweepErrs[i])
				}
				total.Reservations += res.Reservations
				total.Charged += res.Charged
				total.Released += res.Released
			}
			if total != (sluice.SweepResult{Reservations: 3, Charged: 3, Released: 3}) {
				t.Fatalf("three replicas sweeping at once settled %+v, want 3 reservations, 3 charged, 3 released", total)
			}
			if res, err := l.Sweep(ctx); err != nil || res.Reservations != 0 {
				t.Fatalf("second sweep: %+v %v", res, err)
			}
			eff, err := l.Effective(ctx, holderID)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range eff {
				want := map[string]int64{"inflight": 0, "daily": 300, "daily_release": 0}[e.Rule]
				if e.Used != want {
					t.Errorf("%s used %d after the sweep, want %d", e.Rule, e.Used, want)
				}
			}
			for i := range 3 {
				if _, err := l.Admit(ctx, req); err != nil {
					t.Fatalf("admission %d after the leases expired: %v", i, err)
				}
			}
			if _, err := l.Admit(ctx, req); !errors.Is(err, sluice.ErrBusy) {
				t.Fatalf("fourth admission: %v, want busy", err)
			}
		})
	}
}
