package redisstore

import "github.com/redis/rueidis"

// ForceChunkedProbe makes Cluster sweeps use the pipelined fallback probe.
func ForceChunkedProbe(on bool) { forceChunkedProbe = on }

// RawClient connects to the servers behind a store URL, for tests.
func RawClient(url string) (rueidis.Client, error) {
	co, cluster, err := clientOption(url)
	if err != nil {
		return nil, err
	}
	co.DisableCache, co.ForceSingleClient = true, !cluster
	return rueidis.NewClient(co)
}

// OutstandingCancels returns the cancellations s is still sending.
func OutstandingCancels(s *Store) int64 { return s.cancels.Load() }
