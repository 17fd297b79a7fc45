//go:build !unix

package main

// maxConnections is the client connections serve holds at most: configured,
// or fasthttp's own cap.
func maxConnections(configured int) int { return configured }
