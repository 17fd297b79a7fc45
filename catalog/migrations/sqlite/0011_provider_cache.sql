-- provider: the deployment that served a call (or last failed it), by its provider's name, as the
-- log line and the metrics' provider label name it. A model may have several deployments; '' for a
-- call refused before any was tried, and for the records written before this column.
-- cache_saved_micros: for a call answered from the response cache (outcome cache_hit), what the call
-- it replayed cost, in micro-dollars: what the hit saved.
ALTER TABLE call_records ADD COLUMN provider TEXT NOT NULL DEFAULT '';
ALTER TABLE call_records ADD COLUMN cache_saved_micros INTEGER NOT NULL DEFAULT 0;
-- no_cache: a key whose calls never read nor write the response cache (keys create --no-cache).
ALTER TABLE api_keys ADD COLUMN no_cache INTEGER NOT NULL DEFAULT 0;
-- usage_ledger.cache_saved_micros: what the response cache's hits (the rows of kind cache_hit) saved, in micro-dollars.
ALTER TABLE usage_ledger ADD COLUMN cache_saved_micros INTEGER NOT NULL DEFAULT 0;
