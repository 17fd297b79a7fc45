package catalogsessions

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/gateway"
)

// TestSession_EveryFieldCrosses fills every field of a catalog session and
// checks it survives the round trip, so a field added to one side and not
// the other fails here instead of being dropped.
func TestSession_EveryFieldCrosses(t *testing.T) {
	c, g := reflect.TypeFor[catalog.Session](), reflect.TypeFor[gateway.Session]()
	if c.NumField() != g.NumField() {
		t.Fatalf("catalog.Session has %d fields, gateway.Session %d", c.NumField(), g.NumField())
	}
	var in catalog.Session
	v := reflect.ValueOf(&in).Elem()
	for i := range v.NumField() {
		switch f := v.Field(i); f.Kind() {
		case reflect.String:
			f.SetString(fmt.Sprint("s", i))
		case reflect.Int64:
			f.SetInt(int64(i + 1))
		default:
			f.Set(reflect.ValueOf(time.Unix(int64(i), 0)))
		}
	}
	if out := toCatalog(fromCatalog(in)); out != in {
		t.Fatalf("round trip:\n%+v\nwant\n%+v", out, in)
	}
}

func TestStoreError_KeepsTheCatalogsErrorAndAddsTheGateways(t *testing.T) {
	ceiling := &catalog.CeilingError{Ceiling: "turns", Limit: 3, Used: 3, Want: 1, Session: catalog.Session{ID: "sess_1"}, First: true}
	invalid := fmt.Errorf("catalog: open session: %w: negative ceiling", catalog.ErrInvalid)
	for _, tc := range []struct {
		err  error
		want error
	}{
		{fmt.Errorf("x: %w", catalog.ErrUnknownSession), gateway.ErrUnknownSession},
		{catalog.ErrSessionClosed, gateway.ErrSessionClosed},
		{catalog.ErrTooManySessions, gateway.ErrTooManySessions},
		{invalid, gateway.ErrInvalidSession},
	} {
		got := storeError(tc.err)
		if !errors.Is(got, tc.want) || !errors.Is(got, tc.err) || got.Error() != tc.err.Error() {
			t.Errorf("storeError(%v) = %v: want it to be %v and keep its cause and text", tc.err, got, tc.want)
		}
	}
	got := storeError(ceiling)
	ce, ok := errors.AsType[*gateway.SessionCeilingError](got)
	if !ok || ce.Ceiling != "turns" || ce.Limit != 3 || ce.Used != 3 || ce.Want != 1 || ce.Session.ID != "sess_1" || !ce.First ||
		!errors.Is(got, ceiling) {
		t.Fatalf("storeError(ceiling) = %#v", got)
	}
	down := errors.New("connection refused")
	if got := storeError(down); got != down {
		t.Fatalf("an outage became %v", got)
	}
	if storeError(nil) != nil {
		t.Fatal("nil became an error")
	}
}

// TestMaxAssertedValue_IsTheCatalogsBound: the gateway bounds an asserted
// value as the catalog bounds the same value on a key, without importing
// the catalog.
func TestMaxAssertedValue_IsTheCatalogsBound(t *testing.T) {
	if gateway.MaxAssertedValue != catalog.MaxValueBytes {
		t.Fatalf("gateway.MaxAssertedValue %d, catalog.MaxValueBytes %d", gateway.MaxAssertedValue, catalog.MaxValueBytes)
	}
}
