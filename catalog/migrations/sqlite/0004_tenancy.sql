-- Tenancy. A stored rule's org now scopes it to that org's keys; the rules
-- the previous version stored with the default org applied in every org,
-- so they become deployment rules (org ''), as they were in effect (their
-- definitions keep "org":"default"; the column is what counts). An
-- admin token may be scoped to one org (org '' reads and changes every
-- org). An override of a workspace, team or user names its org, so that
-- two orgs' workspaces of one name have overrides of their own.

-- Rule names are unique within their org: an org's rule of the same name
-- as a deployment rule replaces it in that org.
CREATE TABLE rules_by_org (
	org        TEXT    NOT NULL, -- '' for a deployment rule, which applies in every org
	name       TEXT    NOT NULL,
	definition TEXT    NOT NULL, -- JSON: the rule's fields (catalog.Rule)
	enabled    INTEGER NOT NULL DEFAULT 1,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (org, name)
);
INSERT INTO rules_by_org (org, name, definition, enabled, created_at, updated_at)
	SELECT CASE WHEN org = 'default' THEN '' ELSE org END, name, definition, enabled, created_at, updated_at FROM rules;
DROP TABLE rules;
ALTER TABLE rules_by_org RENAME TO rules;

ALTER TABLE admin_tokens ADD COLUMN org TEXT NOT NULL DEFAULT '';

CREATE TABLE overrides_by_org (
	rule        TEXT    NOT NULL,
	org         TEXT    NOT NULL, -- the org of a workspace, team or user; '' for other attributes
	attribute   TEXT    NOT NULL,
	value       TEXT    NOT NULL,
	limit_value INTEGER, -- NULL inherits the rule's limit, 0 disables
	burst       INTEGER, -- NULL inherits the rule's burst
	expires_at  INTEGER,
	updated_at  INTEGER NOT NULL,
	PRIMARY KEY (rule, org, attribute, value)
);
INSERT INTO overrides_by_org (rule, org, attribute, value, limit_value, burst, expires_at, updated_at)
	SELECT rule, CASE WHEN attribute IN ('workspace', 'team', 'user') THEN 'default' ELSE '' END,
		attribute, value, limit_value, burst, expires_at, updated_at FROM overrides;
DROP TABLE overrides;
ALTER TABLE overrides_by_org RENAME TO overrides;

-- The usage ledger keeps each org's workspaces apart.
CREATE TABLE usage_ledger_by_org (
	org                 TEXT    NOT NULL,
	workspace           TEXT    NOT NULL,
	day                 TEXT    NOT NULL, -- UTC date, YYYY-MM-DD
	route               TEXT    NOT NULL,
	model               TEXT    NOT NULL,
	requests            INTEGER NOT NULL DEFAULT 0,
	input_tokens        INTEGER NOT NULL DEFAULT 0,
	output_tokens       INTEGER NOT NULL DEFAULT 0,
	cached_input_tokens INTEGER NOT NULL DEFAULT 0,
	cost_micros         INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (org, workspace, day, route, model)
) WITHOUT ROWID;
INSERT INTO usage_ledger_by_org (org, workspace, day, route, model, requests, input_tokens, output_tokens, cached_input_tokens, cost_micros)
	SELECT 'default', workspace, day, route, model, requests, input_tokens, output_tokens, cached_input_tokens, cost_micros FROM usage_ledger;
DROP TABLE usage_ledger;
ALTER TABLE usage_ledger_by_org RENAME TO usage_ledger;
CREATE INDEX usage_ledger_day ON usage_ledger (day);

-- An audit entry about a workspace names its org, so that a viewer reads
-- its own org's entries only.
ALTER TABLE audit_log ADD COLUMN org TEXT NOT NULL DEFAULT '';
UPDATE audit_log SET org = 'default' WHERE workspace <> '';
