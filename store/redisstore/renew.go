package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
)

var _ sluice.LeaseRenewer = (*Store)(nil)

// RenewLeases moves the deadline of each batch's reservation records and
// leases, one script per slot group, all of them pipelined (renew.lua).
// Like admissions, a deadline is the caller's clock and now the server's.
func (s *Store) RenewLeases(ctx context.Context, now time.Time, renewals []sluice.Batch) error {
	var execs []rueidis.LuaExec
	for i := range renewals {
		b := &renewals[i]
		p, err := s.plan(b)
		if err != nil {
			return fmt.Errorf("redisstore: renew leases: %w", err)
		}
		deadline := itoa(ceilMicro(b.Deadline))
		for gi := range p.groups {
			g := &p.groups[gi]
			keys := []string{s.dueKey(g.slot)}
			for _, i := range g.idx {
				if b.Charges[i].Kind == sluice.KindConcurrency {
					keys = append(keys, p.keys[i])
				}
			}
			var rec string
			if g.indexed {
				rec = s.record(b, p, g)
			} else if len(keys) == 1 {
				continue // rate charges only: nothing held
			}
			execs = append(execs, rueidis.LuaExec{Keys: keys, Args: []string{s.scriptNow(now), deadline, p.member, rec}})
		}
	}
	if len(execs) == 0 {
		return nil
	}
	ctx, cancel := s.call(ctx)
	defer cancel()
	for _, res := range renewScript.ExecMulti(ctx, s.client, execs...) {
		if err := res.Error(); err != nil {
			return fmt.Errorf("redisstore: renew leases: %w", err)
		}
	}
	return nil
}
