package gateway_test

import (
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestMain ends the package's output with the npm clients' test when it
// skipped it.
func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m))
}
