//go:build race

package gateway_test

// raceBuild is set when the tests run with the race detector, which adds
// allocations of its own.
const raceBuild = true
