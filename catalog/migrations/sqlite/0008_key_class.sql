-- A key's priority class, on rules with classes (empty: its tier's, else the rule's default
-- class), and its own bound on how long its calls may wait for rate and concurrency rules, in
-- nanoseconds (0: its tier's, else the deployment's max_wait).

ALTER TABLE api_keys ADD COLUMN class TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN max_wait INTEGER NOT NULL DEFAULT 0;
