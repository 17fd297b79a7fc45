package admin

import (
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestMain ends the package's output with the browser and promtool tests
// it skipped.
func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m))
}
