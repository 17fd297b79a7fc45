// Package ruletest gives the tests of every layer that reads or writes
// rules (the config file, the catalog, the admin API) one sluice.Rule with
// every field set, so that a field added to sluice.Rule is checked to
// survive each layer without a change to its tests.
package ruletest

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// Filled returns a rule whose every field, nested ones included, holds a
// value that no other field holds (so that two fields a layer swaps are
// seen), with Disabled true (so that enabled is written false). Source is
// left empty: it is reported, never read. The rule is not valid: it checks
// the layers' encodings, not the engine's rules.
func Filled(tb testing.TB) sluice.Rule {
	tb.Helper()
	var r sluice.Rule
	n := 0
	if err := fill(reflect.ValueOf(&r).Elem(), &n); err != nil {
		tb.Fatalf("ruletest: sluice.Rule: %v", err)
	}
	r.Source = ""
	return r
}

// fill sets v to a value made from the counter n, counting on.
func fill(v reflect.Value, n *int) error {
	*n++
	if v.Type() == reflect.TypeFor[time.Duration]() {
		v.SetInt(int64(*n) * int64(time.Second))
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("v%d", *n))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(*n) / 100)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Struct:
		for i := range v.NumField() {
			if !v.Type().Field(i).IsExported() {
				continue
			}
			if err := fill(v.Field(i), n); err != nil {
				return fmt.Errorf("%s: %w", v.Type().Field(i).Name, err)
			}
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		return fill(v.Index(0), n)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		return fill(v.Elem(), n)
	case reflect.Map:
		key, val := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		if err := fill(key, n); err != nil {
			return err
		}
		if err := fill(val, n); err != nil {
			return err
		}
		v.Set(reflect.MakeMapWithSize(v.Type(), 1))
		v.SetMapIndex(key, val)
	default:
		return fmt.Errorf("no value for a field of kind %s: teach ruletest one", v.Kind())
	}
	return nil
}
