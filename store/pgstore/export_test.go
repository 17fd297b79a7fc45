package pgstore

// GroupCalls returns how many calls the group commit of s made and how many
// Admit and Settle operations they carried.
func GroupCalls(s *Store) (calls, ops int64) { return s.stats.calls.Load(), s.stats.ops.Load() }

// SetExecHook makes s call hook before each group call, with its number of
// operations. Set it before s is used.
func SetExecHook(s *Store, hook func(ops int)) { s.testHookExec = hook }

// Queued returns how many operations wait for the next group call of s.
func Queued(s *Store) int {
	s.queue.mu.Lock()
	defer s.queue.mu.Unlock()
	return len(s.queue.waiting)
}

// PendingCancels returns how many releases of admissions whose callers gave
// up are still trying to reach the database.
func PendingCancels(s *Store) int64 { return s.pendingCancels.Load() }
