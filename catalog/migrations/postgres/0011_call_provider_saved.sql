-- The PostgreSQL translation of migrations/sqlite/0011_call_provider_saved.sql.
-- provider: the deployment's provider that served a call; cache_saved_micros: what a response cache
-- hit saved, in micro-dollars.
ALTER TABLE call_records ADD COLUMN provider TEXT NOT NULL DEFAULT '';
ALTER TABLE call_records ADD COLUMN cache_saved_micros BIGINT NOT NULL DEFAULT 0;
