package pgstore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/store/pgstore"
)

// childEnv names the schema a re-executed test binary works in: set, the
// binary is a replica driven through its stdin (see replica).
const childEnv = "SLUICE_PGSTORE_REPLICA"

// TestMain lets the replica tests re-run this binary as separate processes,
// and ends the package's output with the tests testenv skipped.
func TestMain(m *testing.M) {
	if schema := os.Getenv(childEnv); schema != "" {
		os.Exit(replica(schema))
	}
	// The parallel tests wait on the database (a scenario's schema made
	// and migrated), a proxy's delay, a row held locked, child processes.
	testenv.WaitingTests(4)
	os.Exit(testenv.Run(m))
}

// The scenarios the replicas run, each on its own subject and rule.
var (
	replicaBudget = sluice.Rule{Name: "monthly", Kind: sluice.KindBudget, Subject: "workspace",
		Metric: sluice.MetricTokens, Limit: 1000, Period: sluice.PeriodMonth}
	replicaRate        = sluice.Rule{Name: "per_day", Kind: sluice.KindRate, Subject: "key", Limit: 50, Window: 24 * time.Hour}
	replicaConcurrency = sluice.Rule{Name: "inflight", Kind: sluice.KindConcurrency, Subject: "key", Limit: 5}
	holdRules          = []sluice.Rule{
		{Name: "hold_inflight", Kind: sluice.KindConcurrency, Subject: "key", Limit: 3},
		{Name: "hold_budget", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 1 << 40, Period: sluice.PeriodMonth},
	}
	budgetID = sluice.Identity{Workspace: "w-budget", Key: "k-budget"}
	rateID   = sluice.Identity{Workspace: "w-rate", Key: "k-rate"}
	concID   = sluice.Identity{Workspace: "w-conc", Key: "k-conc"}
	holdID   = sluice.Identity{Workspace: "w-hold", Key: "k-hold"}
)

const (
	replicaWorkers = 8
	// holdTimeout and holdSlack make the leases of the killed replica expire
	// 2.5 s after it admitted them, in database time.
	holdTimeout = 2 * time.Second
	holdSlack   = 500 * time.Millisecond
)

func replicaLimiter(s sluice.Store, rules ...sluice.Rule) (*sluice.Limiter, error) {
	return sluice.New(sluice.Options{Store: s, Rules: rules, DefaultTimeout: holdTimeout, ExpirySlack: holdSlack})
}

// replica is the child process: it opens a store on the database clock and
// runs each command read from stdin, answering on stdout: "ready", then one
// "done <command> <result>" line per command. Interval lines "I start end"
// (Unix ns, wall clock) precede the concurrency result. Errors go to
// stderr with exit status 3.
func replica(schema string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "replica:", err)
		return 3
	}
	s, err := pgstore.Open(context.Background(), pgstore.Options{URL: os.Getenv(testenv.PostgresVar), Schema: schema, MaxConns: 4})
	if err != nil {
		return fail(err)
	}
	defer s.Close()
	out := bufio.NewWriter(os.Stdout)
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
	say("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var err error
		switch cmd := in.Text(); cmd {
		case "budget":
			err = hammer(s, replicaBudget, sluice.Request{Identity: budgetID, Max: sluice.Usage{InputTokens: 7}}, 30, say)
		case "rate":
			err = hammer(s, replicaRate, sluice.Request{Identity: rateID}, 10, say)
		case "concurrency":
			err = holdAndCount(s, say)
		case "hold":
			err = holdAndWait(s, say)
		default:
			err = fmt.Errorf("unknown command %q", cmd)
		}
		if err != nil {
			return fail(err)
		}
	}
	return 0
}

// hammer admits req attempts times from each of replicaWorkers goroutines and
// reports how many were admitted. Refusals other than the rule's are errors.
func hammer(s sluice.Store, rule sluice.Rule, req sluice.Request, attempts int, say func(string, ...any)) error {
	l, err := replicaLimiter(s, rule)
	if err != nil {
		return err
	}
	var admitted atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	for range replicaWorkers {
		wg.Go(func() {
			for range attempts {
				_, err := l.Admit(context.Background(), req)
				switch {
				case err == nil:
					admitted.Add(1)
				case errors.Is(err, sluice.ErrBudgetExhausted) || errors.Is(err, sluice.ErrRateLimited):
				default:
					failed.Store(err)
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return err
	}
	say("done %s %d", rule.Name, admitted.Load())
	return nil
}

// holdAndCount admits, holds for 10 ms and settles, from every worker for a
// second, printing the interval each lease was certainly held: from after
// Admit returned to before Settle was called.
func holdAndCount(s sluice.Store, say func(string, ...any)) error {
	l, err := replicaLimiter(s, replicaConcurrency)
	if err != nil {
		return err
	}
	ctx := context.Background()
	var failed atomic.Value
	var wg sync.WaitGroup
	var admitted atomic.Int64
	stop := time.Now().Add(time.Second)
	for range replicaWorkers {
		wg.Go(func() {
			for time.Now().Before(stop) {
				r, err := l.Admit(ctx, sluice.Request{Identity: concID})
				if errors.Is(err, sluice.ErrBusy) {
					time.Sleep(time.Millisecond)
					continue
				}
				if err != nil {
					failed.Store(err)
					return
				}
				start := time.Now().UnixNano()
				time.Sleep(10 * time.Millisecond)
				end := time.Now().UnixNano()
				if err := r.Settle(ctx, sluice.Usage{}); err != nil {
					failed.Store(err)
					return
				}
				admitted.Add(1)
				say("I %d %d", start, end)
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return err
	}
	say("done inflight %d", admitted.Load())
	return nil
}

// holdAndWait settles five reservations of 7 tokens, then admits three
// calls of 100 tokens (the concurrency cap) and holds them until killed.
func holdAndWait(s sluice.Store, say func(string, ...any)) error {
	l, err := replicaLimiter(s, holdRules...)
	if err != nil {
		return err
	}
	ctx := context.Background()
	req := sluice.Request{Identity: holdID, Max: sluice.Usage{InputTokens: 100}}
	for range 5 {
		r, err := l.Admit(ctx, req)
		if err != nil {
			return err
		}
		if err := r.Settle(ctx, sluice.Usage{InputTokens: 7}); err != nil {
			return err
		}
	}
	for range 3 {
		if _, err := l.Admit(ctx, req); err != nil {
			return err
		}
	}
	say("done hold 3")
	select {}
}

// replicaProc is a running child.
type replicaProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

func startReplicas(t *testing.T, schema string, n int) []*replicaProc {
	t.Helper()
	procs := make([]*replicaProc, n)
	for i := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+schema)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := &replicaProc{cmd: cmd, stdin: stdin, lines: make(chan string, 4096)}
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				p.lines <- sc.Text()
			}
			close(p.lines)
		}()
		t.Cleanup(func() {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		})
		procs[i] = p
	}
	for i, p := range procs {
		if line := p.next(t, 30*time.Second); line != "ready" {
			t.Fatalf("replica %d: got %q, want ready", i, line)
		}
	}
	return procs
}

func (p *replicaProc) next(t *testing.T, wait time.Duration) string {
	t.Helper()
	select {
	case line, ok := <-p.lines:
		if !ok {
			t.Fatalf("replica exited: %v", p.cmd.Wait())
		}
		return line
	case <-time.After(wait):
		t.Fatalf("replica silent for %v", wait)
	}
	return ""
}

// run sends cmd to every replica at once and returns each one's output lines
// up to and including its "done" line.
func run(t *testing.T, procs []*replicaProc, cmd string) [][]string {
	t.Helper()
	for _, p := range procs {
		if _, err := io.WriteString(p.stdin, cmd+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	out := make([][]string, len(procs))
	for i, p := range procs {
		for {
			line := p.next(t, 60*time.Second)
			out[i] = append(out[i], line)
			if strings.HasPrefix(line, "done ") {
				break
			}
		}
	}
	return out
}

// doneCount is the number at the end of a "done" line.
func doneCount(t *testing.T, lines []string) int64 {
	t.Helper()
	f := strings.Fields(lines[len(lines)-1])
	n, err := strconv.ParseInt(f[len(f)-1], 10, 64)
	if err != nil {
		t.Fatalf("bad done line %q", lines[len(lines)-1])
	}
	return n
}

func effectiveUsed(t *testing.T, l *sluice.Limiter, id sluice.Identity, rule string) int64 {
	t.Helper()
	eff, err := l.Effective(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range eff {
		if e.Rule == rule {
			return e.Used
		}
	}
	t.Fatalf("no rule %q in %+v", rule, eff)
	return 0
}

// TestReplicas_ThreeProcessesShareExactLimits runs three OS processes, each
// with eight workers, against one subject per rule, on the database clock: a
// worst-case budget admits exactly what fits, a rate rule exactly its burst,
// and a concurrency cap is never exceeded.
func TestReplicas_ThreeProcessesShareExactLimits(t *testing.T) {
	t.Parallel()
	schema := testSchema(t)
	s := openStore(t, schema, pgstore.Options{})
	procs := startReplicas(t, schema, 3)

	t.Run("BudgetWorstCaseZeroOvershoot", func(t *testing.T) {
		var admitted int64
		for _, lines := range run(t, procs, "budget") {
			admitted += doneCount(t, lines)
		}
		if want := replicaBudget.Limit / 7; admitted != want {
			t.Fatalf("admitted %d requests of 7 tokens into %d, want exactly %d", admitted, replicaBudget.Limit, want)
		}
		l, _ := replicaLimiter(s, replicaBudget)
		if used := effectiveUsed(t, l, budgetID, replicaBudget.Name); used != admitted*7 {
			t.Fatalf("budget used %d, want %d", used, admitted*7)
		}
	})
	t.Run("RateAdmitsExactlyItsBurst", func(t *testing.T) {
		var admitted int64
		for _, lines := range run(t, procs, "rate") {
			admitted += doneCount(t, lines)
		}
		if admitted != replicaRate.Limit {
			t.Fatalf("admitted %d at a burst of %d, want exactly the burst", admitted, replicaRate.Limit)
		}
	})
	t.Run("ConcurrencyCapNeverExceeded", func(t *testing.T) {
		type event struct {
			at    int64
			delta int
		}
		var events []event
		var admitted int64
		for _, lines := range run(t, procs, "concurrency") {
			admitted += doneCount(t, lines)
			for _, line := range lines[:len(lines)-1] {
				var start, end int64
				if _, err := fmt.Sscanf(line, "I %d %d", &start, &end); err != nil {
					t.Fatalf("bad interval line %q", line)
				}
				events = append(events, event{start, +1}, event{end, -1})
			}
		}
		// Ends sort before starts at the same instant: intervals that only
		// touch do not overlap.
		slices.SortFunc(events, func(a, b event) int {
			if a.at != b.at {
				return int(min(max(a.at-b.at, -1), 1))
			}
			return a.delta - b.delta
		})
		held, most := 0, 0
		for _, e := range events {
			held += e.delta
			most = max(most, held)
		}
		t.Logf("%d calls admitted by 3 processes, at most %d held at once (cap %d)", admitted, most, replicaConcurrency.Limit)
		if most > int(replicaConcurrency.Limit) || most < 1 {
			t.Fatalf("at most %d held at once, want 1..%d", most, replicaConcurrency.Limit)
		}
	})
}

// TestReplicas_KillNineFreesLeasesAndSweepSettlesOnce kills a replica
// holding three leases and three reservations of 100 tokens, after it settled
// five of 7. Its slots stay taken until the leases expire (database time),
// then free; three stores sweeping at once settle its reservations exactly
// once between them.
func TestReplicas_KillNineFreesLeasesAndSweepSettlesOnce(t *testing.T) {
	t.Parallel()
	schema := testSchema(t)
	s := openStore(t, schema, pgstore.Options{})
	procs := startReplicas(t, schema, 1)
	run(t, procs, "hold")
	heldAt := time.Now()
	if err := procs[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = procs[0].cmd.Wait()

	l, err := replicaLimiter(s, holdRules...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := sluice.Request{Identity: holdID, Max: sluice.Usage{InputTokens: 100}}
	if _, err := l.Admit(ctx, req); !errors.Is(err, sluice.ErrBusy) {
		t.Fatalf("admit while the dead replica's leases are live: %v, want busy", err)
	}
	if res, err := l.Sweep(ctx); err != nil || res.Reservations != 0 {
		t.Fatalf("sweep before the deadline: %+v %v", res, err)
	}
	if used := effectiveUsed(t, l, holdID, "hold_budget"); used != 5*7+3*100 {
		t.Fatalf("budget used %d before the sweep, want %d settled plus reserved", used, 5*7+3*100)
	}

	var freedAfter time.Duration
	for {
		r, err := l.Admit(ctx, req)
		if err == nil {
			freedAfter = time.Since(heldAt)
			if err := r.Release(ctx); err != nil {
				t.Fatal(err)
			}
			break
		}
		if !errors.Is(err, sluice.ErrBusy) {
			t.Fatal(err)
		}
		if time.Since(heldAt) > 15*time.Second {
			t.Fatal("the dead replica's slots never freed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The leases were taken just before "done hold" was printed, with 2.5 s
	// to live; they must not free much before that.
	t.Logf("slots freed %v after the kill", freedAfter)
	if freedAfter < holdTimeout+holdSlack-500*time.Millisecond {
		t.Fatalf("slots freed after %v, before the leases' expiry", freedAfter)
	}

	// Three replicas sweep at once: each reservation is settled by one.
	var total sluice.SweepResult
	var mu sync.Mutex
	var wg sync.WaitGroup
	sweepers := []*pgstore.Store{s, openStore(t, schema, pgstore.Options{}), openStore(t, schema, pgstore.Options{})}
	start := make(chan struct{})
	for _, sw := range sweepers {
		wg.Go(func() {
			<-start
			res, err := sw.Sweep(ctx, time.Now())
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			total.Reservations += res.Reservations
			total.Charged += res.Charged
			total.Released += res.Released
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	if total.Reservations != 3 || total.Charged != 3 || total.Released != 0 {
		t.Fatalf("sweeps settled %+v between them, want 3 reservations charged once", total)
	}
	if used := effectiveUsed(t, l, holdID, "hold_budget"); used != 5*7+3*100 {
		t.Fatalf("budget used %d after the sweep, want %d", used, 5*7+3*100)
	}
	if res, err := l.Sweep(ctx); err != nil || res.Reservations != 0 {
		t.Fatalf("second sweep: %+v %v, want nothing left", res, err)
	}
	if used := effectiveUsed(t, l, holdID, "hold_budget"); used != 5*7+3*100 {
		t.Fatalf("budget used %d after a second sweep, want %d", used, 5*7+3*100)
	}
}
