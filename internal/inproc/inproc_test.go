package inproc_test

import (
	"reflect"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/inproc"
)

// TestKind_StringIsTheRuleKind: each kind's name is the sluice.Kind of the
// rules it counts for, which stores and the admin API report.
func TestKind_StringIsTheRuleKind(t *testing.T) {
	for k, want := range map[inproc.Kind]sluice.Kind{inproc.Rate: sluice.KindRate, inproc.Budget: sluice.KindBudget,
		inproc.Concurrency: sluice.KindConcurrency, 0: ""} {
		if got := sluice.Kind(k.String()); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", k, got, want)
		}
	}
}

// TestAdmission_DetachedCopiesEveryFieldButActual: a field added to Charge
// later is copied too, or this test names it.
func TestAdmission_DetachedCopiesEveryFieldButActual(t *testing.T) {
	var c inproc.Charge
	v := reflect.ValueOf(&c).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int64, reflect.Int32:
			f.SetInt(int64(i + 1))
		default:
			f.SetUint(uint64(i + 1))
		}
	}
	a := &inproc.Admission{ID: 7, Deadline: 9, Charges: []inproc.Charge{c}, Subjects: []string{"k"}}
	d := a.Detached()
	want := c
	want.Actual = 0
	if d.ID != 7 || d.Deadline != 9 || !reflect.DeepEqual(d.Charges, []inproc.Charge{want}) || !reflect.DeepEqual(d.Subjects, a.Subjects) {
		t.Fatalf("Detached() = %+v, want the admission with Actual zero: %+v", d, want)
	}
	d.Charges[0].Amount, d.Subjects[0] = -1, "other"
	if a.Charges[0].Amount == -1 || a.Subjects[0] != "k" {
		t.Fatal("Detached shares memory with the admission")
	}
}
