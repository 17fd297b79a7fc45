-- Keys, usage ledger, audit log and overrides. Times are Unix nanoseconds
-- (UTC); NULL means "never" (no expiry, not revoked).

CREATE TABLE api_keys (
	id             TEXT    NOT NULL PRIMARY KEY,
	secret_hash    BLOB    NOT NULL, -- SHA-256 of the whole secret; the secret itself is never stored
	org            TEXT    NOT NULL,
	workspace      TEXT    NOT NULL,
	team           TEXT    NOT NULL DEFAULT '',
	user_id        TEXT    NOT NULL,
	tier           TEXT    NOT NULL DEFAULT '',
	allowed_models TEXT    NOT NULL DEFAULT '[]', -- JSON array of model names; empty means any
	name           TEXT    NOT NULL DEFAULT '',
	expires_at     INTEGER,
	created_at     INTEGER NOT NULL,
	revoked_at     INTEGER
);
CREATE INDEX api_keys_workspace ON api_keys (workspace, created_at);

CREATE TABLE usage_ledger (
	workspace           TEXT    NOT NULL,
	day                 TEXT    NOT NULL, -- UTC date, YYYY-MM-DD
	route               TEXT    NOT NULL,
	model               TEXT    NOT NULL,
	requests            INTEGER NOT NULL DEFAULT 0,
	input_tokens        INTEGER NOT NULL DEFAULT 0,
	output_tokens       INTEGER NOT NULL DEFAULT 0,
	cached_input_tokens INTEGER NOT NULL DEFAULT 0,
	cost_micros         INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (workspace, day, route, model)
) WITHOUT ROWID;
CREATE INDEX usage_ledger_day ON usage_ledger (day);

CREATE TABLE audit_log (
	id      INTEGER PRIMARY KEY AUTOINCREMENT,
	at      INTEGER NOT NULL,
	actor   TEXT    NOT NULL,
	action  TEXT    NOT NULL,
	target  TEXT    NOT NULL DEFAULT '',
	before  TEXT, -- JSON, NULL when absent
	after   TEXT, -- JSON, NULL when absent
	denied  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX audit_log_at ON audit_log (at);
CREATE INDEX audit_log_target ON audit_log (target, id);

CREATE TABLE overrides (
	rule        TEXT    NOT NULL,
	attribute   TEXT    NOT NULL,
	value       TEXT    NOT NULL,
	limit_value INTEGER, -- NULL inherits the rule's limit, 0 disables
	burst       INTEGER, -- NULL inherits the rule's burst
	expires_at  INTEGER,
	updated_at  INTEGER NOT NULL,
	PRIMARY KEY (rule, attribute, value)
);
