-- The PostgreSQL translation of migrations/sqlite/0011_provider_cache.sql.
-- provider: the deployment's provider that served a call; cache_saved_micros: what a response cache
-- hit saved, in micro-dollars; api_keys.no_cache: a key whose calls never use the response cache.
ALTER TABLE call_records ADD COLUMN provider TEXT NOT NULL DEFAULT '';
ALTER TABLE call_records ADD COLUMN cache_saved_micros BIGINT NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN no_cache BOOLEAN NOT NULL DEFAULT FALSE;
-- usage_ledger.cache_saved_micros: what the response cache's hits (the rows of kind cache_hit) saved, in micro-dollars.
ALTER TABLE usage_ledger ADD COLUMN cache_saved_micros BIGINT NOT NULL DEFAULT 0;
