-- The PostgreSQL translation of migrations/sqlite/0010_key_turns.sql.
-- Whether a key may group its calls into turns (X-Sluice-Turn): a requests rate rule charges a turn
-- once. A key not allowed it has every call charged, whatever it sends.

ALTER TABLE api_keys ADD COLUMN turns BOOLEAN NOT NULL DEFAULT FALSE;
