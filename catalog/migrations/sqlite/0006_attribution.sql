-- Spend attribution and per-call records. A ledger row also names the key,
-- the user, the team and the tag set (X-Sluice-Tags, sorted, joined by
-- commas) it sums, and its kind: 'settled' for usage a call reported (or
-- its estimate), 'swept' for a reservation the sweep charged at its
-- deadline. tokens is what token budgets counted (input + output for a
-- settled row; the amount charged for a swept one, whose split is not
-- known). Counters only: never a prompt or an answer.
CREATE TABLE usage_ledger_attributed (
	org                 TEXT    NOT NULL,
	workspace           TEXT    NOT NULL,
	day                 TEXT    NOT NULL, -- UTC date, YYYY-MM-DD
	route               TEXT    NOT NULL,
	model               TEXT    NOT NULL,
	key_id              TEXT    NOT NULL DEFAULT '',
	user_id             TEXT    NOT NULL DEFAULT '',
	team                TEXT    NOT NULL DEFAULT '',
	tags                TEXT    NOT NULL DEFAULT '',
	kind                TEXT    NOT NULL DEFAULT 'settled',
	requests            INTEGER NOT NULL DEFAULT 0,
	input_tokens        INTEGER NOT NULL DEFAULT 0,
	output_tokens       INTEGER NOT NULL DEFAULT 0,
	cached_input_tokens INTEGER NOT NULL DEFAULT 0,
	tokens              INTEGER NOT NULL DEFAULT 0,
	cost_micros         INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (org, workspace, day, route, model, key_id, user_id, team, tags, kind)
) WITHOUT ROWID;
INSERT INTO usage_ledger_attributed (org, workspace, day, route, model, requests, input_tokens, output_tokens, cached_input_tokens, tokens, cost_micros)
	SELECT org, workspace, day, route, model, requests, input_tokens, output_tokens, cached_input_tokens, input_tokens + output_tokens, cost_micros FROM usage_ledger;
DROP TABLE usage_ledger;
ALTER TABLE usage_ledger_attributed RENAME TO usage_ledger;
CREATE INDEX usage_ledger_day ON usage_ledger (day);

-- One row per settled (or swept) call, kept for the configured retention.
-- at is Unix nanoseconds (UTC).
CREATE TABLE call_records (
	id                  INTEGER PRIMARY KEY AUTOINCREMENT,
	at                  INTEGER NOT NULL,
	request_id          TEXT    NOT NULL DEFAULT '',
	org                 TEXT    NOT NULL,
	workspace           TEXT    NOT NULL,
	key_id              TEXT    NOT NULL DEFAULT '',
	user_id             TEXT    NOT NULL DEFAULT '',
	route               TEXT    NOT NULL DEFAULT '',
	model               TEXT    NOT NULL DEFAULT '',
	outcome             TEXT    NOT NULL,
	reserved_tokens     INTEGER NOT NULL DEFAULT 0,
	reserved_cost       INTEGER NOT NULL DEFAULT 0,
	input_tokens        INTEGER NOT NULL DEFAULT 0,
	output_tokens       INTEGER NOT NULL DEFAULT 0,
	cached_input_tokens INTEGER NOT NULL DEFAULT 0,
	cost_micros         INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX call_records_at ON call_records (at);
CREATE INDEX call_records_workspace ON call_records (org, workspace, at);
CREATE INDEX call_records_key ON call_records (key_id, at);
