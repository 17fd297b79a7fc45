package sluice

import (
	"fmt"
	"slices"
	"testing"
)

// serveAll lets each head leave as soon as its turn comes and returns the
// order of service.
func serveAll(w *waitQueues, key CounterKey, names map[*waiter]string) []string {
	var order []string
	for w.queues[key] != nil {
		head := w.queues[key].head
		order = append(order, names[head])
		w.leave(key, head)
	}
	return order
}

func TestFairQueue_RoundRobinAcrossFlows(t *testing.T) {
	var w waitQueues
	key := CounterKey{Subject: "global"}
	names := map[*waiter]string{}
	join := func(flow string, n int) {
		for i := range n {
			names[w.join(key, flow, 1)] = fmt.Sprintf("%s%d", flow, i+1)
		}
	}
	join("a", 4)
	join("b", 1)
	join("c", 2)
	got := serveAll(&w, key, names)
	want := []string{"a1", "b1", "c1", "a2", "c2", "a3", "a4"}
	if !slices.Equal(got, want) {
		t.Fatalf("served %v, want %v", got, want)
	}
	if w.count.Load() != 0 || len(w.queues) != 0 {
		t.Fatalf("queues left: %d waiters, %d queues", w.count.Load(), len(w.queues))
	}
}

// Costs are the tokens a waiter charges: a flow of small calls gets as
// many tokens a round as a flow of large ones.
func TestFairQueue_DeficitRoundRobinByCost(t *testing.T) {
	var w waitQueues
	key := CounterKey{Subject: "global"}
	names := map[*waiter]string{}
	for i := range 3 {
		names[w.join(key, "big", 10)] = fmt.Sprintf("A%d", i+1)
	}
	for i := range 20 {
		names[w.join(key, "small", 1)] = fmt.Sprintf("b%d", i+1)
	}
	got := serveAll(&w, key, names)
	var want []string
	want = append(want, "A1")
	for i := range 10 {
		want = append(want, fmt.Sprintf("b%d", i+1))
	}
	want = append(want, "A2")
	for i := 10; i < 20; i++ {
		want = append(want, fmt.Sprintf("b%d", i+1))
	}
	want = append(want, "A3")
	if !slices.Equal(got, want) {
		t.Fatalf("served %v, want %v", got, want)
	}
}

// A waiter that gives up before its turn leaves its flow's order intact,
// and a flow whose waiters all left loses its place.
func TestFairQueue_WaitersLeavingBeforeTheirTurn(t *testing.T) {
	var w waitQueues
	key := CounterKey{Subject: "global"}
	names := map[*waiter]string{}
	a1 := w.join(key, "a", 1)
	a2 := w.join(key, "a", 1)
	b1 := w.join(key, "b", 1)
	c1 := w.join(key, "c", 1)
	a3 := w.join(key, "a", 1)
	names[a1], names[a2], names[b1], names[c1], names[a3] = "a1", "a2", "b1", "c1", "a3"
	w.leave(key, a2) // out of time before its turn
	w.leave(key, b1) // its flow's only waiter
	got := serveAll(&w, key, names)
	want := []string{"a1", "c1", "a3"}
	if !slices.Equal(got, want) {
		t.Fatalf("served %v, want %v", got, want)
	}
	for _, x := range []*waiter{a1, a2, b1, c1, a3} {
		select {
		case <-x.turn:
			if x == a2 || x == b1 {
				t.Fatalf("%s had a turn after it left", names[x])
			}
		default:
			if x != a2 && x != b1 {
				t.Fatalf("%s never had its turn", names[x])
			}
		}
	}
}

func TestIdentity_FlowIsTheTenant(t *testing.T) {
	cases := []struct {
		id   Identity
		want string
	}{
		{Identity{Org: "o", Workspace: "ws", Key: "k"}, "wo\x1ews"},
		{Identity{Workspace: "ws", Key: "k"}, "wws"},
		{Identity{Key: "k", IP: "1.2.3.4"}, "kk"},
		{Identity{IP: "1.2.3.4"}, "i1.2.3.4"},
	}
	for _, c := range cases {
		if got := c.id.flow(); got != c.want {
			t.Errorf("%+v: flow %q, want %q", c.id, got, c.want)
		}
	}
	// The same workspace name in two orgs is two flows.
	a, b := Identity{Org: "x", Workspace: "ws"}, Identity{Org: "y", Workspace: "ws"}
	if a.flow() == b.flow() {
		t.Fatal("two orgs' workspaces share a flow")
	}
}
