package admin

import (
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestMain ends the package's output with the integration tests it
// skipped (Redis, PostgreSQL, the browser, promtool).
func TestMain(m *testing.M) {
	os.Exit(testenv.Run(m))
}
