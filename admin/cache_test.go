package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/catalog"
)

// DELETE /admin/v1/cache purges an org's or a model's response cache
// entries, admins only, and audits it.
func TestAPI_PurgeCache(t *testing.T) {
	e := newEnv(t)
	var asked [][2]string
	e.handler.opts.PurgeCache = func(_ context.Context, org, model string) (int, error) {
		asked = append(asked, [2]string{org, model})
		return 3, nil
	}
	r := e.must(http.StatusOK, "DELETE", "/admin/v1/cache?org=acme&model=mock-small", rootToken, nil)
	if r.body["purged"] != 3.0 || len(asked) != 1 || asked[0] != [2]string{"acme", "mock-small"} {
		t.Fatalf("%s; purge asked %v", r.raw, asked)
	}
	e.must(http.StatusBadRequest, "DELETE", "/admin/v1/cache", rootToken, nil)
	e.must(http.StatusForbidden, "DELETE", "/admin/v1/cache?org=acme", e.token("viewer", "acme"), nil)
	if len(asked) != 1 {
		t.Fatalf("a refused purge reached the cache: %v", asked)
	}
	entries, err := e.cat.ListAudit(context.Background(), catalog.AuditQuery{Action: "cache.purge"})
	if err != nil || len(entries) != 1 {
		t.Fatalf("audit %+v (%v), want one cache.purge", entries, err)
	}
	var after struct{ Purged int }
	if raw, _ := entries[0].After.(json.RawMessage); json.Unmarshal(raw, &after) != nil || after.Purged != 3 || entries[0].Org != "acme" {
		t.Fatalf("audit entry %+v, want acme's purge of 3", entries[0])
	}
}
