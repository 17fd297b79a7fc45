-- Keys, usage ledger, audit log and overrides: the PostgreSQL translation of
-- migrations/sqlite/0001_init.sql, with the same table and column names. Times
-- are Unix nanoseconds (UTC); NULL means "never" (no expiry, not revoked).

CREATE TABLE api_keys (
	id             TEXT   NOT NULL PRIMARY KEY,
	secret_hash    BYTEA  NOT NULL, -- SHA-256 of the whole secret; the secret itself is never stored
	org            TEXT   NOT NULL,
	workspace      TEXT   NOT NULL,
	team           TEXT   NOT NULL DEFAULT '',
	user_id        TEXT   NOT NULL,
	tier           TEXT   NOT NULL DEFAULT '',
	allowed_models TEXT   NOT NULL DEFAULT '[]', -- JSON array of model names; empty means any
	name           TEXT   NOT NULL DEFAULT '',
	expires_at     BIGINT,
	created_at     BIGINT NOT NULL,
	revoked_at     BIGINT
);
CREATE INDEX api_keys_workspace ON api_keys (workspace, created_at);

CREATE TABLE usage_ledger (
	workspace           TEXT   NOT NULL,
	day                 TEXT   NOT NULL, -- UTC date, YYYY-MM-DD
	route               TEXT   NOT NULL,
	model               TEXT   NOT NULL,
	requests            BIGINT NOT NULL DEFAULT 0,
	input_tokens        BIGINT NOT NULL DEFAULT 0,
	output_tokens       BIGINT NOT NULL DEFAULT 0,
	cached_input_tokens BIGINT NOT NULL DEFAULT 0,
	cost_micros         BIGINT NOT NULL DEFAULT 0,
	PRIMARY KEY (workspace, day, route, model)
);
CREATE INDEX usage_ledger_day ON usage_ledger (day);

CREATE TABLE audit_log (
	id      BIGSERIAL PRIMARY KEY,
	at      BIGINT  NOT NULL,
	actor   TEXT    NOT NULL,
	action  TEXT    NOT NULL,
	target  TEXT    NOT NULL DEFAULT '',
	before  TEXT, -- JSON, NULL when absent
	after   TEXT, -- JSON, NULL when absent
	denied  BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX audit_log_at ON audit_log (at);
CREATE INDEX audit_log_target ON audit_log (target, id);

CREATE TABLE overrides (
	rule        TEXT   NOT NULL,
	attribute   TEXT   NOT NULL,
	value       TEXT   NOT NULL,
	limit_value BIGINT, -- NULL inherits the rule's limit, 0 disables
	burst       BIGINT, -- NULL inherits the rule's burst
	expires_at  BIGINT,
	updated_at  BIGINT NOT NULL,
	PRIMARY KEY (rule, attribute, value)
);
