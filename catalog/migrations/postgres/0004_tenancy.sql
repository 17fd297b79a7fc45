-- Tenancy: the PostgreSQL translation of migrations/sqlite/0004_tenancy.sql.

UPDATE rules SET org = '' WHERE org = 'default';
ALTER TABLE rules DROP CONSTRAINT rules_pkey;
ALTER TABLE rules ADD PRIMARY KEY (org, name);
DROP INDEX rules_org;

ALTER TABLE admin_tokens ADD COLUMN org TEXT NOT NULL DEFAULT '';

ALTER TABLE overrides ADD COLUMN org TEXT NOT NULL DEFAULT '';
UPDATE overrides SET org = 'default' WHERE attribute IN ('workspace', 'team', 'user');
ALTER TABLE overrides DROP CONSTRAINT overrides_pkey;
ALTER TABLE overrides ADD PRIMARY KEY (rule, org, attribute, value);

-- The usage ledger keeps each org's workspaces apart.
ALTER TABLE usage_ledger ADD COLUMN org TEXT NOT NULL DEFAULT 'default';
ALTER TABLE usage_ledger DROP CONSTRAINT usage_ledger_pkey;
ALTER TABLE usage_ledger ADD PRIMARY KEY (org, workspace, day, route, model);

-- An audit entry about a workspace names its org.
ALTER TABLE audit_log ADD COLUMN org TEXT NOT NULL DEFAULT '';
UPDATE audit_log SET org = 'default' WHERE workspace <> '';
