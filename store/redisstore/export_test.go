package redisstore

// ForceChunkedProbe makes Cluster sweeps use the pipelined fallback probe.
func ForceChunkedProbe(on bool) { forceChunkedProbe = on }
