-- call_records without AUTOINCREMENT: its sqlite_sequence row was written again with every
-- insert, and cost about as much as the record itself (BenchmarkLedgerWrite, calls=true,
-- group=100: 10.5 µs a call with it, 6 µs without). An id is still the largest one plus one:
-- retention deletes the oldest records, never the newest, so ids keep growing; only a table
-- emptied by retention starts again at 1, and nothing outside a listing's own pages names an id.
-- SQLite cannot drop AUTOINCREMENT in place: the table is built again.

CREATE TABLE call_records_rowid (
	id                  INTEGER PRIMARY KEY,
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
INSERT INTO call_records_rowid SELECT * FROM call_records;
DROP TABLE call_records;
ALTER TABLE call_records_rowid RENAME TO call_records;
CREATE INDEX call_records_at ON call_records (at);
CREATE INDEX call_records_workspace ON call_records (org, workspace, at);
CREATE INDEX call_records_key ON call_records (key_id, at);
