package sqlitestore_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/sqlitestore"
)

const (
	crashChildEnv = "SLUICE_SQLITESTORE_CRASH_CHILD"
	// crashAsyncEnv makes the child settle as the gateway does: with
	// SettleAsync, settlements held for a group, acknowledged in done.
	crashAsyncEnv = "SLUICE_SQLITESTORE_CRASH_ASYNC"
)

// TestMain lets the crash test re-run this binary as the process it kills.
func TestMain(m *testing.M) {
	if path := os.Getenv(crashChildEnv); path != "" {
		crashChild(path, os.Getenv(crashAsyncEnv) != "")
		return
	}
	os.Exit(m.Run())
}

var crashRules = []sluice.Rule{{Name: "monthly", Kind: sluice.KindBudget, Subject: "workspace",
	Metric: sluice.MetricTokens, Limit: 1 << 50, Period: sluice.PeriodMonth}}

func crashLimiter(s sluice.Store) (*sluice.Limiter, error) {
	return sluice.New(sluice.Options{Store: s, Rules: crashRules, DefaultTimeout: time.Hour})
}

var crashID = sluice.Identity{Workspace: "w", Key: "k"}

// crashChild opens the store, holds one reservation of 1000 tokens open,
// and settles reservations of 100 tokens at 7 from four goroutines until it
// is killed. It prints L once the long reservation is held, A after each
// admission and S after each settlement returns (with async, when
// SettleAsync calls done, the worker going on meanwhile).
func crashChild(path string, async bool) {
	s, err := sqlitestore.Open(sqlitestore.Options{Path: path, HoldSettlements: async})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	l, err := crashLimiter(s)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	ctx := context.Background()
	var out sync.Mutex
	say := func(s string) {
		out.Lock()
		os.Stdout.WriteString(s + "\n")
		out.Unlock()
	}
	if _, err := l.Admit(ctx, sluice.Request{Identity: crashID, Max: sluice.Usage{InputTokens: 1000}}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	say("L")
	for range 4 {
		go func() {
			for {
				r, err := l.Admit(ctx, sluice.Request{Identity: crashID, Max: sluice.Usage{InputTokens: 100}})
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(3)
				}
				say("A")
				if async {
					r.SettleAsync(ctx, sluice.Usage{InputTokens: 7}, func(err error) {
						if err != nil {
							fmt.Fprintln(os.Stderr, err)
							os.Exit(3)
						}
						say("S")
					})
					continue
				}
				if err := r.Settle(ctx, sluice.Usage{InputTokens: 7}); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(3)
				}
				say("S")
			}
		}()
	}
	select {}
}

// TestCrash_KillNineLosesNoSettledUsage kills a process using the store with
// SIGKILL at random moments and checks, after each restart, that every
// acknowledged settlement is counted, the reservation held open is charged
// by the restart, and nothing is counted beyond what was reserved.
func TestCrash_KillNineLosesNoSettledUsage(t *testing.T) { killNineRounds(t, false) }

// TestCrash_KillNineLosesNoAsyncSettlement is the same with settlements
// made through SettleAsync and held for a group, as the gateway makes
// them: a settlement acknowledged by done survives the kill.
func TestCrash_KillNineLosesNoAsyncSettlement(t *testing.T) { killNineRounds(t, true) }

func killNineRounds(t *testing.T, async bool) {
	path := filepath.Join(t.TempDir(), "store.db")
	var admitted, settled, rounds int64
	for round := range 5 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
		if async {
			cmd.Env = append(cmd.Env, crashAsyncEnv+"=1")
		}
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		held := make(chan time.Time, 1)
		var a, s int64
		var counted sync.WaitGroup
		progress := make(chan int64, 1024)
		counted.Go(func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				switch sc.Text() {
				case "L":
					held <- time.Now()
				case "A":
					a++
				case "S":
					s++
					select {
					case progress <- s:
					default:
					}
				}
			}
		})
		var heldAt time.Time
		select {
		case heldAt = <-held:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("round %d: the child never held its reservation", round)
		}
		// Let it work for a while, then kill it at a random moment, at least
		// 50 ms after the long reservation was admitted (the journal's
		// promise is 10 ms; the margin absorbs a loaded CI machine).
		deadline := time.After(10 * time.Second)
		for n := int64(0); n < 50; {
			select {
			case n = <-progress:
			case <-deadline:
				_ = cmd.Process.Kill()
				t.Fatalf("round %d: the child settled only %d reservations", round, n)
			}
		}
		time.Sleep(time.Until(heldAt.Add(50*time.Millisecond)) + time.Duration(rand.IntN(20))*time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		counted.Wait()
		admitted += a
		settled += s
		rounds++

		store, err := sqlitestore.Open(sqlitestore.Options{Path: path})
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		l, err := crashLimiter(store)
		if err != nil {
			t.Fatal(err)
		}
		eff, err := l.Effective(context.Background(), crashID)
		if err != nil || len(eff) != 1 {
			t.Fatalf("round %d: effective: %v %v", round, eff, err)
		}
		used := eff[0].Used
		// Every acknowledged settlement (7) and every long reservation
		// (1000) is counted. At most, each admission not acknowledged as
		// settled counts its 100 reserved, plus one unprinted admission per
		// worker per round.
		low := 7*settled + 1000*rounds
		high := low + 100*(admitted-settled) + 4*100*rounds
		t.Logf("round %d: %d admitted, %d settled, used %d in [%d, %d]", round, admitted, settled, used, low, high)
		if used < low || used > high {
			t.Fatalf("round %d: used %d, want within [%d, %d]", round, used, low, high)
		}
		if err := store.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
