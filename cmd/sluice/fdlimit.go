//go:build unix

package main

import "syscall"

// maxConnections is the client connections serve holds at most: configured,
// or the descriptor limit less 256 for the stores, the catalog and the
// providers (at least 64).
func maxConnections(configured int) int {
	if configured > 0 {
		return configured
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == 0 || lim.Cur > 1<<20 {
		return 0 // fasthttp's own cap
	}
	return max(int(lim.Cur)-256, 64)
}
