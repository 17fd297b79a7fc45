-- session_id: the Sluice session a call was charged to (X-Sluice-Session, or the session a live
-- connection's client secret was minted with); '' for a call made outside a session.
-- connection_id: for a live connection (GET /v1/realtime) and each of its responses, the
-- connection's request id; '' for an HTTP call.
-- audio_input_tokens, audio_output_tokens: the audio parts of input_tokens and output_tokens (a live
-- response's speech, priced at the audio rates); 0 for text.
ALTER TABLE call_records ADD COLUMN session_id TEXT NOT NULL DEFAULT '';
ALTER TABLE call_records ADD COLUMN connection_id TEXT NOT NULL DEFAULT '';
ALTER TABLE call_records ADD COLUMN audio_input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE call_records ADD COLUMN audio_output_tokens INTEGER NOT NULL DEFAULT 0;
CREATE INDEX call_records_session ON call_records (session_id, at) WHERE session_id <> '';
