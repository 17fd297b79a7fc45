-- The PostgreSQL translation of migrations/sqlite/0012_call_session.sql.
-- session_id: the Sluice session a call was charged to; connection_id: a live connection's request
-- id, on the connection's record and its responses'; audio_input_tokens, audio_output_tokens: the
-- audio parts of input_tokens and output_tokens.
ALTER TABLE call_records ADD COLUMN session_id TEXT NOT NULL DEFAULT '';
ALTER TABLE call_records ADD COLUMN connection_id TEXT NOT NULL DEFAULT '';
ALTER TABLE call_records ADD COLUMN audio_input_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE call_records ADD COLUMN audio_output_tokens BIGINT NOT NULL DEFAULT 0;
CREATE INDEX call_records_session ON call_records (session_id, at) WHERE session_id <> '';
