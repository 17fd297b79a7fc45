package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// scenario is one fault, on one kind of counter store.
type scenario struct {
	name string
	// store is "redis" or "postgres".
	store    string
	replicas int
	// toxics are toxiproxy toxics (its JSON), added to the faulty
	// replicas' proxies when the fault starts and removed when it ends.
	toxics []string
	// cut stops the faulty replicas' proxies instead: the port closed,
	// every connection to the store gone.
	cut bool
	// faulty is how many replicas (the first ones) suffer the fault; the
	// others must go on serving. 0 means all.
	faulty int
	// what describes the fault for the table.
	what string
	// expect503 says the fault must be answered 503: a store that cannot
	// answer within its timeout. A bandwidth limit may slow calls down
	// and no more.
	expect503 bool
}

// scenarios is the suite, each fault on Redis and on PostgreSQL, the cut
// replica on Redis. Latency and the stall are above both stores' timeouts
// (Redis 250 ms, the gateway's PostgreSQL store 400 ms). A stall is tried
// two ways: bytes dropped (toxiproxy's timeout toxic: nothing arrives) and
// bytes held, then delivered when it ends (a latency longer than the fault,
// removed: toxiproxy delivers what it holds), where admissions reach the
// store after their callers gave up.
func scenarios() []scenario {
	var all []scenario
	for _, store := range []string{"redis", "postgres"} {
		all = append(all,
			scenario{name: store + "-latency", store: store, replicas: 1, expect503: true,
				what:   "every answer of the store delayed 600 ms",
				toxics: []string{`{"name":"latency","type":"latency","stream":"downstream","attributes":{"latency":600}}`}},
			scenario{name: store + "-stall", store: store, replicas: 1, expect503: true,
				what: "connections held, no byte through either way (toxiproxy timeout 0)",
				toxics: []string{`{"name":"stall_up","type":"timeout","stream":"upstream","attributes":{"timeout":0}}`,
					`{"name":"stall_down","type":"timeout","stream":"downstream","attributes":{"timeout":0}}`}},
			scenario{name: store + "-held", store: store, replicas: 1, expect503: true,
				what: "every byte held both ways for the fault, then delivered (a paused server, a partition that heals)",
				toxics: []string{`{"name":"held_up","type":"latency","stream":"upstream","attributes":{"latency":600000}}`,
					`{"name":"held_down","type":"latency","stream":"downstream","attributes":{"latency":600000}}`}},
			scenario{name: store + "-reset", store: store, replicas: 1, expect503: true,
				what:   "every connection reset (RST) when the store answers: the call reached it",
				toxics: []string{`{"name":"reset","type":"reset_peer","stream":"downstream","attributes":{"timeout":0}}`}},
			scenario{name: store + "-bandwidth", store: store, replicas: 1,
				what: "4 KB/s each way",
				toxics: []string{`{"name":"bw_up","type":"bandwidth","stream":"upstream","attributes":{"rate":4}}`,
					`{"name":"bw_down","type":"bandwidth","stream":"downstream","attributes":{"rate":4}}`}},
		)
	}
	all = append(all, scenario{name: "redis-one-replica-cut", store: "redis", replicas: 3, cut: true, faulty: 1, expect503: true,
		what: "replica 0 of 3 cut off from Redis (port closed, connections gone)"})
	return all
}

// answer is one call as its client saw it.
type answer struct {
	replica    int
	budget     bool // the budget workspace's call
	sent, got  time.Time
	status     int
	code       string
	tokens     int64
	retryAfter bool
	err        error
}

// result is what one scenario measured.
type result struct {
	sc              scenario
	fault, slack    time.Duration
	first503        time.Duration // from the fault's start to the first 503; -1 for none
	slowest503      time.Duration // the longest call answered 503
	durations503    []time.Duration
	recovered       time.Duration // from the fault's end to the faulty replicas' first 200 sent after it; -1 for never
	capMax          int           // calls in flight at the provider at once, per workspace, at most
	capFreeAfter    time.Duration // from the last answer to the cap free in the store; -1 for never
	budgetServed    int64         // tokens answered 200 to the budget workspace
	budgetExhausted bool          // the budget workspace was refused budget_exceeded
	// holdsAfter is how long after the last answer the store's counters
	// equalled what the clients were served, and the ledger the store, for
	// both workspaces; -1 for never within the bound.
	holdsAfter         time.Duration
	storeUsed, served  [2]int64 // per workspace: cap, budget
	ledger             [2]int64
	othersRefused      int // 503s (or errors) from replicas that had no fault
	othersServedDuring int // their 200s during the fault
	byStatus           map[string]int
	noRetryAfter       int // 503 or 429 without Retry-After
	// phantomRefused counts calls of the cap workspace refused by its cap
	// though its clients alone cannot fill it (one replica: two clients,
	// cap 3): places held by admissions whose callers gave up; lastPhantom
	// is when the last of them was answered, from the fault's end.
	phantomRefused int
	lastPhantom    time.Duration
	errs           []string
}

const (
	warmup = time.Second
	// recoveryBound is how long after the fault the load waits for a
	// faulty replica to serve again.
	recoveryBound = 10 * time.Second
	// settleBound is how long after the last answer the store may take to
	// hold nothing for calls not served and the ledger to agree.
	settleBound = 5 * time.Second
)

// run starts the scenario's replicas, puts them under load, starts the
// fault after a warm-up, ends it, and measures.
func (s *suite) run(ctx context.Context, sc scenario, fault time.Duration) (*result, error) {
	g, err := s.startGateways(sc.name, sc.store, sc.replicas)
	if err != nil {
		return nil, err
	}
	defer s.stopGateways(g)
	faulty := sc.faulty
	if faulty == 0 {
		faulty = sc.replicas
	}
	res := &result{sc: sc, fault: fault, slack: s.slack, byStatus: map[string]int{}}
	log := &answerLog{}
	record := log.add
	// Clients are stopped between calls, never in one: a call cancelled by
	// its client is charged what the provider did, not what it answered.
	var stopped atomic.Bool
	var wg, spenders sync.WaitGroup
	defer func() { stopped.Store(true); wg.Wait(); spenders.Wait() }()
	// The steady load: two clients per replica on the cap workspace, calls
	// of 20 ms at the provider.
	for i := range 2 * sc.replicas {
		replica := i % sc.replicas
		wg.Go(func() {
			for !stopped.Load() && ctx.Err() == nil {
				a := s.call(ctx, g.addrs[replica], g.capKey, "hello [mock tokens=4] [mock delay=20] ws="+g.capWS, 16)
				a.replica = replica
				record(a)
				if a.status != 200 {
					sleep(ctx, 5*time.Millisecond)
				}
			}
		})
	}
	logf := s.logf
	logf("%s: warm-up %s", sc.name, warmup)
	if !sleep(ctx, warmup) {
		return nil, ctx.Err()
	}
	faultStart := time.Now()
	logf("%s: fault on: %s", sc.name, sc.what)
	if err := s.applyFault(g, sc, faulty); err != nil {
		return nil, err
	}
	// The spenders start with the fault, one per replica, and spend the
	// budget workspace's budget to the end, through and after the fault.
	spendUntil := time.Now().Add(fault + recoveryBound + 10*time.Second)
	for replica := range sc.replicas {
		spenders.Go(func() {
			for time.Now().Before(spendUntil) && !stopped.Load() && ctx.Err() == nil {
				a := s.call(ctx, g.addrs[replica], g.budKey,
					fmt.Sprintf("spend [mock tokens=%d] [mock delay=20] ws=%s", spendTokens, g.budWS), spendTokens)
				a.replica, a.budget = replica, true
				record(a)
				if refusedByBudget(a) {
					return
				}
				if a.status != 200 {
					sleep(ctx, 5*time.Millisecond)
				}
			}
		})
	}
	if !sleep(ctx, fault) {
		return nil, ctx.Err()
	}
	if err := s.removeFault(g, sc, faulty); err != nil {
		return nil, err
	}
	faultEnd := time.Now()
	logf("%s: fault off", sc.name)
	// Wait until every faulty replica served a call sent after the fault
	// and the budget is spent, then half a second more of load.
	res.recovered = -1
	for time.Since(faultEnd) < recoveryBound {
		if d, ok := log.recoveredAt(faulty, faultEnd); ok {
			res.recovered = d
			break
		}
		sleep(ctx, 10*time.Millisecond)
	}
	spenders.Wait()
	sleep(ctx, 500*time.Millisecond)
	stopped.Store(true)
	wg.Wait()
	lastAnswer := time.Now()
	logf("%s: load stopped; checking the store and the ledger", sc.name)

	res.first503, res.slowest503 = -1, 0
	for _, a := range log.list {
		k := fmt.Sprint(a.status)
		if a.err != nil {
			k = "error"
			if len(res.errs) < 3 {
				res.errs = append(res.errs, a.err.Error())
			}
		} else if a.code != "" {
			k += " " + a.code
		}
		res.byStatus[k]++
		if (a.status == 503 || a.status == 429 && !refusedByBudget(a)) && !a.retryAfter {
			res.noRetryAfter++
		}
		if a.status == 200 {
			res.served[b2i(a.budget)] += a.tokens
		}
		if sc.replicas == 1 && !a.budget && a.status == 429 && a.code == "concurrency_limit_exceeded" {
			res.phantomRefused++
			res.lastPhantom = max(res.lastPhantom, a.got.Sub(faultEnd))
		}
		if a.budget && refusedByBudget(a) {
			res.budgetExhausted = true
		}
		if a.replica >= faulty && !a.sent.Before(faultStart) && a.sent.Before(faultEnd) {
			if a.status == 200 {
				res.othersServedDuring++
			} else if a.status == 503 || a.err != nil {
				res.othersRefused++
			}
		}
		if a.status == 503 && a.replica < faulty && !a.got.Before(faultStart) {
			if d := a.got.Sub(faultStart); res.first503 < 0 || d < res.first503 {
				res.first503 = d
			}
			res.slowest503 = max(res.slowest503, a.got.Sub(a.sent))
			res.durations503 = append(res.durations503, a.got.Sub(a.sent))
		}
	}
	res.budgetServed = res.served[1]
	res.capMax = max(s.mock.maxInFlight(g.capWS), s.mock.maxInFlight(g.budWS))

	// The store and the ledger, read through replica 0's admin API.
	admin := g.admins[0]
	res.capFreeAfter, res.holdsAfter = -1, -1
	for time.Since(lastAnswer) < settleBound {
		capUsed, err := s.used(ctx, admin, g.capWS, "fault_cap")
		if err == nil && capUsed == 0 && res.capFreeAfter < 0 {
			res.capFreeAfter = time.Since(lastAnswer)
		}
		agree := err == nil
		for i, ws := range []string{g.capWS, g.budWS} {
			used, uerr := s.used(ctx, admin, ws, "fault_budget")
			led, lerr := s.ledger(ctx, admin, ws)
			if uerr != nil || lerr != nil {
				agree = false
				continue
			}
			res.storeUsed[i], res.ledger[i] = used, led
			agree = agree && used == res.served[i] && led == used
		}
		if agree && res.capFreeAfter >= 0 {
			res.holdsAfter = time.Since(lastAnswer)
			break
		}
		sleep(ctx, 50*time.Millisecond)
	}
	return res, nil
}

// refusedByBudget reports a refusal of the daily budget: spent, or too
// little left for the call's reservation. It lasts until the day ends, so
// it is told by reset_at rather than Retry-After.
func refusedByBudget(a answer) bool {
	return a.status == 429 && (a.code == "budget_exceeded" || a.code == "budget_insufficient")
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// answerLog is every answer of a scenario's clients.
type answerLog struct {
	mu   sync.Mutex
	list []answer
}

func (l *answerLog) add(a answer) {
	l.mu.Lock()
	l.list = append(l.list, a)
	l.mu.Unlock()
}

// recoveredAt reports whether each of the first faulty replicas served a
// call sent after end, and the latest of those answers, from end.
func (l *answerLog) recoveredAt(faulty int, end time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	first := make([]time.Time, faulty)
	for _, a := range l.list {
		if a.replica < faulty && a.status == 200 && !a.sent.Before(end) && (first[a.replica].IsZero() || a.got.Before(first[a.replica])) {
			first[a.replica] = a.got
		}
	}
	var latest time.Duration
	for _, t := range first {
		if t.IsZero() {
			return 0, false
		}
		latest = max(latest, t.Sub(end))
	}
	return latest, true
}

func (s *suite) applyFault(g *gateways, sc scenario, faulty int) error {
	for _, p := range g.proxies[:faulty] {
		if sc.cut {
			p.Stop()
			continue
		}
		for _, tx := range sc.toxics {
			if _, err := p.Toxics.AddToxicJson(strings.NewReader(tx)); err != nil {
				return fmt.Errorf("toxic %s: %w", tx, err)
			}
		}
	}
	return nil
}

func (s *suite) removeFault(g *gateways, sc scenario, faulty int) error {
	for _, p := range g.proxies[:faulty] {
		if sc.cut {
			if err := p.Start(); err != nil {
				return fmt.Errorf("proxy %s back: %w", p.Name, err)
			}
			continue
		}
		for _, tx := range sc.toxics {
			var t struct{ Name string }
			_ = json.Unmarshal([]byte(tx), &t)
			if err := p.Toxics.RemoveToxic(context.Background(), t.Name); err != nil {
				return fmt.Errorf("remove toxic %s: %w", t.Name, err)
			}
		}
	}
	return nil
}

// sleep waits d or until ctx ends, and reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// call sends one chat completion to the gateway at addr.
func (s *suite) call(ctx context.Context, addr, key, prompt string, maxTokens int) answer {
	body := fmt.Sprintf(`{"model":"mock-small","max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, maxTokens, prompt)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	a := answer{sent: time.Now()}
	resp, err := s.client.Do(req)
	if err != nil {
		a.got, a.err = time.Now(), err
		return a
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	a.got, a.status, a.err = time.Now(), resp.StatusCode, err
	a.retryAfter = resp.Header.Get("Retry-After") != ""
	var parsed struct {
		Usage struct {
			Total int64 `json:"total_tokens"`
		} `json:"usage"`
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &parsed) == nil {
		a.tokens, a.code = parsed.Usage.Total, parsed.Error.Code
	}
	return a
}

// adminGet decodes the admin API's answer to path into v.
func (s *suite) adminGet(ctx context.Context, admin, path string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		data, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, data)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// used is what the store counts for rule in workspace ws (settled and
// reserved; leases for a cap).
func (s *suite) used(ctx context.Context, admin, ws, rule string) (int64, error) {
	var eff struct {
		Limits []struct {
			Rule string `json:"rule"`
			Used int64  `json:"used"`
		} `json:"limits"`
	}
	if err := s.adminGet(ctx, admin, "/admin/v1/effective?workspace="+ws, &eff); err != nil {
		return 0, err
	}
	for _, l := range eff.Limits {
		if l.Rule == rule {
			return l.Used, nil
		}
	}
	return 0, fmt.Errorf("workspace %s: no rule %s", ws, rule)
}

// ledger is the tokens the catalog's usage ledger holds for ws.
func (s *suite) ledger(ctx context.Context, admin, ws string) (int64, error) {
	var u struct {
		Usage []struct {
			In  int64 `json:"input_tokens"`
			Out int64 `json:"output_tokens"`
		} `json:"usage"`
	}
	if err := s.adminGet(ctx, admin, "/admin/v1/usage?workspace="+ws, &u); err != nil {
		return 0, err
	}
	var total int64
	for _, r := range u.Usage {
		total += r.In + r.Out
	}
	return total, nil
}

// sortedKeys returns m's keys in order.
func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
