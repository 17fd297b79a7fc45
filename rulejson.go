package sluice

import (
	"encoding/json"
	"time"
)

// ruleFields is Rule without its methods, so that RuleJSON can embed its
// fields without taking on Rule's MarshalJSON.
type ruleFields Rule

// RuleJSON is the JSON form of a Rule, the one schema of a rule wherever
// rules are JSON (the catalog's definitions, the admin API): Rule's fields
// under their json names, Window and BusyRetryAfter as duration strings
// ("1m"; encoding/json would write a time.Duration as nanoseconds), and
// enabled in place of Disabled. Rule's MarshalJSON and UnmarshalJSON write
// and read it.
//
// A layer that adds fields of its own embeds RuleJSON beside them, not
// Rule: an embedded Rule would lend the layer its JSON methods, which know
// nothing of the layer's fields. A field added to Rule so reaches every
// layer.
type RuleJSON struct {
	ruleFields
	Window         Duration `json:"window,omitempty"`
	BusyRetryAfter Duration `json:"busy_retry_after,omitempty"`
	// Enabled is the inverse of Disabled; left out, the rule is enabled.
	Enabled *bool `json:"enabled,omitempty"`
}

// JSON returns r's JSON form.
func (r Rule) JSON() RuleJSON {
	enabled := !r.Disabled
	return RuleJSON{ruleFields: ruleFields(r), Window: Duration(r.Window), BusyRetryAfter: Duration(r.BusyRetryAfter), Enabled: &enabled}
}

// Rule returns the rule j describes.
func (j RuleJSON) Rule() Rule {
	r := Rule(j.ruleFields)
	r.Window, r.BusyRetryAfter = time.Duration(j.Window), time.Duration(j.BusyRetryAfter)
	r.Disabled = j.Enabled != nil && !*j.Enabled
	return r
}

// MarshalJSON writes r's JSON form, RuleJSON. Source is not written.
func (r Rule) MarshalJSON() ([]byte, error) { return json.Marshal(r.JSON()) }

// UnmarshalJSON reads a rule's JSON form, RuleJSON; the fields it leaves
// out are zero. Unknown fields are ignored: a layer that refuses them
// decodes RuleJSON with its own json.Decoder.
func (r *Rule) UnmarshalJSON(b []byte) error {
	var j RuleJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = j.Rule()
	return nil
}
