-- Spend attribution and per-call records (see the sqlite migration of the
-- same number for the meaning of each column).
ALTER TABLE usage_ledger ADD COLUMN key_id TEXT NOT NULL DEFAULT '';
ALTER TABLE usage_ledger ADD COLUMN user_id TEXT NOT NULL DEFAULT '';
ALTER TABLE usage_ledger ADD COLUMN team TEXT NOT NULL DEFAULT '';
ALTER TABLE usage_ledger ADD COLUMN tags TEXT NOT NULL DEFAULT '';
ALTER TABLE usage_ledger ADD COLUMN kind TEXT NOT NULL DEFAULT 'settled';
ALTER TABLE usage_ledger ADD COLUMN tokens BIGINT NOT NULL DEFAULT 0;
UPDATE usage_ledger SET tokens = input_tokens + output_tokens;
ALTER TABLE usage_ledger DROP CONSTRAINT usage_ledger_pkey;
ALTER TABLE usage_ledger ADD PRIMARY KEY (org, workspace, day, route, model, key_id, user_id, team, tags, kind);

CREATE TABLE call_records (
	id                  BIGSERIAL PRIMARY KEY,
	at                  BIGINT NOT NULL,
	request_id          TEXT   NOT NULL DEFAULT '',
	org                 TEXT   NOT NULL,
	workspace           TEXT   NOT NULL,
	key_id              TEXT   NOT NULL DEFAULT '',
	user_id             TEXT   NOT NULL DEFAULT '',
	route               TEXT   NOT NULL DEFAULT '',
	model               TEXT   NOT NULL DEFAULT '',
	outcome             TEXT   NOT NULL,
	reserved_tokens     BIGINT NOT NULL DEFAULT 0,
	reserved_cost       BIGINT NOT NULL DEFAULT 0,
	input_tokens        BIGINT NOT NULL DEFAULT 0,
	output_tokens       BIGINT NOT NULL DEFAULT 0,
	cached_input_tokens BIGINT NOT NULL DEFAULT 0,
	cost_micros         BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX call_records_at ON call_records (at);
CREATE INDEX call_records_workspace ON call_records (org, workspace, at);
CREATE INDEX call_records_key ON call_records (key_id, at);
