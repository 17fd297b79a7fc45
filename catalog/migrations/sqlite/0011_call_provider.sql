-- The deployment that served a call (or last failed it): its provider's name, as the log line and
-- the metrics' provider label name it. A model may have several deployments; '' for a call refused
-- before any was tried, and for the records written before this column.
ALTER TABLE call_records ADD COLUMN provider TEXT NOT NULL DEFAULT '';
