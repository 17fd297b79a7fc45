-- Stored rules, admin API tokens, and the workspace of each audit entry (so
-- that a viewer scoped to workspaces reads their entries only). The
-- PostgreSQL translation of migrations/sqlite/0002_admin.sql.

CREATE TABLE rules (
	name       TEXT    NOT NULL PRIMARY KEY,
	org        TEXT    NOT NULL,
	definition TEXT    NOT NULL, -- JSON: the rule's fields (catalog.Rule)
	enabled    BOOLEAN NOT NULL DEFAULT TRUE,
	created_at BIGINT  NOT NULL,
	updated_at BIGINT  NOT NULL
);
CREATE INDEX rules_org ON rules (org, name);

CREATE TABLE admin_tokens (
	id          TEXT   NOT NULL PRIMARY KEY,
	secret_hash BYTEA  NOT NULL, -- SHA-256 of the whole secret; the secret itself is never stored
	name        TEXT   NOT NULL DEFAULT '',
	role        TEXT   NOT NULL, -- admin or viewer
	workspaces  TEXT   NOT NULL DEFAULT '[]', -- JSON array: the workspaces a viewer may read
	created_by  TEXT   NOT NULL,
	created_at  BIGINT NOT NULL,
	expires_at  BIGINT,
	revoked_at  BIGINT
);

ALTER TABLE audit_log ADD COLUMN workspace TEXT NOT NULL DEFAULT '';
CREATE INDEX audit_log_workspace ON audit_log (workspace, id);
