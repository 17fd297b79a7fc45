-- Whether a key may group its calls into turns (X-Sluice-Turn): a requests rate rule charges a turn
-- once. A key not allowed it has every call charged, whatever it sends (1: allowed).

ALTER TABLE api_keys ADD COLUMN turns INTEGER NOT NULL DEFAULT 0;
