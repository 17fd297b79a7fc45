-- The PostgreSQL translation of migrations/sqlite/0011_call_provider.sql.
-- The deployment that served a call (or last failed it): its provider's name; '' for a call refused
-- before any was tried, and for the records written before this column.
ALTER TABLE call_records ADD COLUMN provider TEXT NOT NULL DEFAULT '';
