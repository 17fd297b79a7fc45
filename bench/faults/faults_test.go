package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// TestFaults runs every scenario of the command (each fault on Redis and
// on PostgreSQL, one replica of three cut off from Redis) and fails on
// every promise a scenario breaks, its timing bounds 250 ms looser than the
// command's for a machine loaded with the other packages' tests.
func TestFaults(t *testing.T) {
	o := options{redis: testenv.RedisURL(t), postgres: testenv.PostgresURL(t), fault: 2 * time.Second,
		slack: 250 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s, err := newSuite(ctx, o, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	var results []*result
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			r, err := s.run(ctx, sc, o.fault)
			if err != nil {
				t.Fatal(err)
			}
			results = append(results, r)
			for _, b := range r.broken() {
				t.Error(b)
			}
		})
	}
	t.Log("\n" + markdown(results, o.fault, "go test -C bench -race -run TestFaults ./faults"))
}
