package gateway_test

import (
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestMain ends the package's output with the npm clients' test when it
// skipped it.
func TestMain(m *testing.M) {
	// The parallel tests mostly wait: on fake providers' paced streams,
	// on retry hints, on the npm clients.
	testenv.WaitingTests(4)
	os.Exit(testenv.Run(m))
}
