package main

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The promises every scenario is held to, beyond the hard limits, which
// hold exactly.
const (
	// answer503Within bounds the slowest call answered 503 while the store
	// cannot answer: Redis's admission timeout is 250 ms, the gateway's
	// PostgreSQL store's 400 ms, the promise half a second.
	answer503Within = 500 * time.Millisecond
	// recoverWithin bounds how long after the fault ends a faulty replica
	// serves again.
	recoverWithin = 3 * time.Second
	// capFreeWithin bounds how long after the last answer the store still
	// counts a lease: none is phantom.
	capFreeWithin = 2 * time.Second
)

// broken lists the promises r breaks; empty when all hold.
func (r *result) broken() []string {
	var out []string
	fail := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if r.capMax > concurrencyCap {
		fail("%d calls in flight at the provider at once, cap %d", r.capMax, concurrencyCap)
	}
	if r.budgetServed > tokenBudget || r.storeUsed[1] > tokenBudget {
		fail("budget overshoot: %d tokens served, store counts %d, limit %d", r.budgetServed, r.storeUsed[1], tokenBudget)
	}
	if !r.budgetExhausted {
		fail("the budget workspace was never refused by its budget (%d of %d tokens served)", r.budgetServed, tokenBudget)
	}
	if r.capFreeAfter < 0 || r.capFreeAfter > capFreeWithin+r.slack {
		fail("concurrency cap not free within %s of the last answer", capFreeWithin)
	}
	if r.holdsAfter < 0 {
		fail("within %s of the last answer, store %v, served %v, ledger %v (cap, budget workspaces): they differ",
			settleBound, r.storeUsed, r.served, r.ledger)
	}
	if r.sc.expect503 {
		if r.first503 < 0 {
			fail("no call answered 503 during the fault")
		}
		if r.slowest503 > answer503Within+r.slack {
			fail("a call answered 503 after %s, want within %s", r.slowest503.Round(time.Millisecond), answer503Within)
		}
	}
	if r.recovered < 0 || r.recovered > recoverWithin+r.slack {
		fail("faulty replicas not serving again within %s of the fault's end", recoverWithin)
	}
	if r.sc.faulty > 0 {
		if r.othersRefused > 0 {
			fail("replicas without the fault answered %d calls 503 or not at all during it", r.othersRefused)
		}
		if r.othersServedDuring == 0 {
			fail("replicas without the fault served nothing during it")
		}
	}
	if r.noRetryAfter > 0 {
		fail("%d refusals (503, 429 other than the budget's) without Retry-After", r.noRetryAfter)
	}
	for k, n := range r.byStatus {
		if !strings.HasPrefix(k, "200") && !strings.HasPrefix(k, "429") && !strings.HasPrefix(k, "503") {
			fail("%d answers %s (errors: %s)", n, k, strings.Join(r.errs, "; "))
		}
	}
	return out
}

func ms(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return fmt.Sprintf("%d ms", d.Round(time.Millisecond).Milliseconds())
}

// summary is one row per promise: the worst figure over the scenarios.
func summary(b *bytes.Buffer, results []*result, command string) {
	var capMax int
	var overshoot, heldAfter int64
	var slowest, recovered, capFree, agree time.Duration
	var worst503, worstRecovery, worstCapFree, worstAgree, others string
	never := false
	othersRefused, othersServed := 0, 0
	for _, r := range results {
		capMax = max(capMax, r.capMax)
		overshoot = max(overshoot, r.budgetServed-tokenBudget, r.storeUsed[1]-tokenBudget)
		for i := range r.served {
			heldAfter = max(heldAfter, r.storeUsed[i]-r.served[i], r.ledger[i]-r.storeUsed[i], r.storeUsed[i]-r.ledger[i])
		}
		if r.sc.expect503 && r.slowest503 >= slowest {
			slowest, worst503 = r.slowest503, r.sc.name
		}
		if r.recovered < 0 || r.capFreeAfter < 0 || r.holdsAfter < 0 {
			never = true
		}
		if r.recovered >= recovered {
			recovered, worstRecovery = r.recovered, r.sc.name
		}
		if r.capFreeAfter >= capFree {
			capFree, worstCapFree = r.capFreeAfter, r.sc.name
		}
		if r.holdsAfter >= agree {
			agree, worstAgree = r.holdsAfter, r.sc.name
		}
		if r.sc.faulty > 0 {
			othersRefused += r.othersRefused
			othersServed += r.othersServedDuring
			others = r.sc.name
		}
	}
	row := func(promise, measured string, ok bool) {
		fmt.Fprintf(b, "| %s | %s | `%s` | %s |\n", promise, measured, command, verdictOf(ok))
	}
	b.WriteString("| promise | measured, the worst over the scenarios | command | result |\n| --- | --- | --- | --- |\n")
	row(fmt.Sprintf("no overshoot of a concurrency cap (%d)", concurrencyCap), fmt.Sprintf("%d calls in flight at the provider at most", capMax), capMax <= concurrencyCap)
	row(fmt.Sprintf("no overshoot of a hard budget (%d tokens)", tokenBudget), fmt.Sprintf("overshoot %d tokens (served and counted)", max(overshoot, 0)), overshoot <= 0)
	row(fmt.Sprintf("a call is answered 503 within %s when the store cannot answer", answer503Within),
		fmt.Sprintf("slowest 503 after %s (%s)", ms(slowest), worst503), slowest <= answer503Within)
	row(fmt.Sprintf("serving again within %s of the fault's end", recoverWithin), fmt.Sprintf("%s (%s)", ms(recovered), worstRecovery), !never && recovered <= recoverWithin)
	row(fmt.Sprintf("no phantom lease: the cap free within %s of the last answer", capFreeWithin), fmt.Sprintf("%s (%s)", ms(capFree), worstCapFree), !never && capFree <= capFreeWithin)
	row("no phantom charge: the store counts exactly the tokens served, and the ledger equals the store",
		fmt.Sprintf("largest difference %d tokens; agreeing %s after the last answer (%s)", heldAfter, ms(agree), worstAgree), !never && heldAfter == 0)
	if others != "" {
		row("one replica cut off from the store: the others go on", fmt.Sprintf("they served %d calls during the cut and refused %d (%s)", othersServed, othersRefused, others),
			othersRefused == 0 && othersServed > 0)
	}
	b.WriteString("\n")
}

func verdictOf(ok bool) string {
	if ok {
		return "holds"
	}
	return "**BROKEN**"
}

// markdown is the summary and the table of every scenario's figures and
// verdict.
func markdown(results []*result, fault time.Duration, command string) string {
	var b bytes.Buffer
	summary(&b, results, command)
	fmt.Fprintf(&b, "Each fault lasts %s under load (two clients per replica on a workspace with a concurrency cap of %d, "+
		"one per replica spending a %d-token daily budget to the end through and after the fault). "+
		"Promises: no overshoot of the cap (calls in flight at the provider) or of the budget; a call answered 503 within %s "+
		"when the store cannot answer; serving again within %s of the fault's end; the cap free within %s of the last answer, "+
		"the store's counters equal to the tokens served (nothing held or charged for a 503) and the ledger equal to the store.\n\n",
		fault, concurrencyCap, tokenBudget, answer503Within, recoverWithin, capFreeWithin)
	b.WriteString("| scenario | fault | first 503 after the fault began | 503 answered after: median / slowest | serving again after the fault | in flight, at most (cap 3) | budget served (limit 200000) | cap free / store = served = ledger, after the last answer | result |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range results {
		first, slowest := "none", "none"
		if r.first503 >= 0 {
			first, slowest = ms(r.first503), ms(r.median503())+" / "+ms(r.slowest503)
		}
		verdict := "holds"
		if br := r.broken(); len(br) > 0 {
			verdict = "**BROKEN**: " + strings.Join(br, "; ")
		}
		what := r.sc.what
		if r.sc.faulty > 0 {
			what += fmt.Sprintf("; the others served %d calls during it, refused %d", r.othersServedDuring, r.othersRefused)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d | %d | %s / %s | %s |\n",
			r.sc.name, what, first, slowest, ms(r.recovered), r.capMax, r.budgetServed, ms(r.capFreeAfter), ms(r.holdsAfter), verdict)
	}
	b.WriteString("\nAnswers:\n")
	for _, r := range results {
		var parts []string
		for _, k := range sortedKeys(r.byStatus) {
			parts = append(parts, fmt.Sprintf("%s: %d", k, r.byStatus[k]))
		}
		phantom := ""
		if r.phantomRefused > 0 {
			phantom = fmt.Sprintf("; %d calls refused by the cap though two clients cannot fill it (places held by admissions whose callers gave up), the last %s after the fault's end",
				r.phantomRefused, r.lastPhantom.Round(time.Millisecond))
		}
		fmt.Fprintf(&b, "- %s: %s%s\n", r.sc.name, strings.Join(parts, ", "), phantom)
	}
	fmt.Fprintf(&b, "\n(`%s`)\n", command)
	return b.String()
}

// median503 is the median time of the calls answered 503.
func (r *result) median503() time.Duration {
	d := slices.Clone(r.durations503)
	if len(d) == 0 {
		return -1
	}
	slices.Sort(d)
	return d[len(d)/2]
}
