package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/sluicehq/sluice/catalog"
)

// auditRow is an audit entry as the console shows it: what changed, field
// by field.
type auditRow struct {
	catalog.AuditEntry
	Changes []auditChange
}

// auditChange is one field of an audit entry's before and after: Before
// is empty for a field added, After for one removed. Field is empty when
// before or after is not an object (the whole value changed).
type auditChange struct {
	Field, Before, After string
	Added, Removed       bool
}

// auditChanges lists the fields that differ between an audit entry's
// before and after (every field of a creation or a deletion), by name.
func auditChanges(before, after any) []auditChange {
	b, bObject := auditFields(before)
	a, aObject := auditFields(after)
	if !bObject || !aObject {
		bt, at := auditValueText(before), auditValueText(after)
		if bt == at {
			return nil
		}
		return []auditChange{{Before: bt, After: at, Added: bt == "", Removed: at == ""}}
	}
	var names []string
	for k := range b {
		names = append(names, k)
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	var out []auditChange
	for _, k := range names {
		bv, inBefore := b[k]
		av, inAfter := a[k]
		c := auditChange{Field: k, Before: auditValueText(bv), After: auditValueText(av), Added: !inBefore, Removed: !inAfter}
		if inBefore && inAfter && c.Before == c.After {
			continue
		}
		out = append(out, c)
	}
	return out
}

// auditFields reads v, an audit entry's before or after, as an object's
// fields; nil reads as an object with none, anything else not an object
// as false.
func auditFields(v any) (map[string]any, bool) {
	if v == nil {
		return map[string]any{}, true
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, false
	}
	var fields map[string]any
	if json.Unmarshal(raw, &fields) != nil {
		return nil, false
	}
	if fields == nil {
		fields = map[string]any{}
	}
	return fields, true
}

// auditValueText writes a value of an audit entry compactly: a string as
// it is, anything else as JSON; nil as "".
func auditValueText(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(raw)
}

func (c *console) audit(w http.ResponseWriter, r *http.Request, p *principal, v *view) (int, string, error) {
	q := catalog.AuditQuery{Actor: r.URL.Query().Get("actor"), Action: r.URL.Query().Get("action"), Target: r.URL.Query().Get("target"), Limit: 200}
	if !p.isAdmin() {
		q.Workspaces, q.Org = p.workspaces, p.org
	}
	entries, err := c.h.cat.ListAudit(r.Context(), q)
	if err != nil {
		return 0, "", err
	}
	rows := make([]auditRow, 0, len(entries))
	for _, e := range entries {
		e = c.h.auditInDollars(e)
		rows = append(rows, auditRow{AuditEntry: e, Changes: auditChanges(e.Before, e.After)})
	}
	v.Title, v.Nav, v.Data = "Audit log", "audit", map[string]any{"Entries": rows, "Query": q}
	return http.StatusOK, "audit", nil
}
