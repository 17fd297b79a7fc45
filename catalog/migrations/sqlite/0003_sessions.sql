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
	created_at      INTEGER NOT NULL,
	expires_at      INTEGER NOT NULL,
	closed_at       INTEGER,
	max_turns       INTEGER NOT NULL, -- 0: no ceiling
	max_tokens      INTEGER NOT NULL,
	max_cost        INTEGER NOT NULL, -- micro-dollars
	max_context     INTEGER NOT NULL, -- input tokens of one call
	turns           INTEGER NOT NULL DEFAULT 0,
	tokens          INTEGER NOT NULL DEFAULT 0,
	cost            INTEGER NOT NULL DEFAULT 0,
	ceiling         TEXT -- the ceiling that first refused a call
);
CREATE UNIQUE INDEX sessions_idempotency ON sessions (key_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX sessions_open ON sessions (workspace, user_id, closed_at, expires_at);
