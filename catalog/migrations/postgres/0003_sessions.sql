-- The PostgreSQL translation of migrations/sqlite/0003_sessions.sql.
-- Sessions: a gate for long interactive work, minted by POST /v1/sessions,
-- with ceilings on wall clock, turns, tokens, cost and the context (input
-- tokens) of one call. The counters are
-- charged by one conditional UPDATE per call, so that they hold across
-- replicas sharing the database.

CREATE TABLE sessions (
	id              TEXT    NOT NULL PRIMARY KEY,
	key_id          TEXT    NOT NULL,
	org             TEXT    NOT NULL,
	workspace       TEXT    NOT NULL,
	user_id         TEXT    NOT NULL,
	model           TEXT    NOT NULL,
	idempotency_key TEXT,
	created_at      BIGINT  NOT NULL,
	expires_at      BIGINT  NOT NULL,
	closed_at       BIGINT ,
	max_turns       BIGINT  NOT NULL, -- 0: no ceiling
	max_tokens      BIGINT  NOT NULL,
	max_cost        BIGINT  NOT NULL, -- micro-dollars
	max_context     BIGINT  NOT NULL, -- input tokens of one call
	turns           BIGINT  NOT NULL DEFAULT 0,
	tokens          BIGINT  NOT NULL DEFAULT 0,
	cost            BIGINT  NOT NULL DEFAULT 0,
	ceiling         TEXT -- the ceiling that first refused a call
);
CREATE UNIQUE INDEX sessions_idempotency ON sessions (key_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX sessions_open ON sessions (workspace, user_id, closed_at, expires_at);
