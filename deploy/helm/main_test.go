package helm

import (
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestMain ends the package's output with the chart tests it skipped.
func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m))
}
