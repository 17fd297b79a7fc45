package catalog

import (
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestMain lets more of the parallel tests run at once than there are CPUs,
// and ends the package's output with the PostgreSQL tests it skipped.
func TestMain(m *testing.M) {
	// The parallel tests wait on PostgreSQL: each makes and migrates a
	// schema of its own.
	testenv.WaitingTests(4)
	os.Exit(testenv.Run(m))
}
