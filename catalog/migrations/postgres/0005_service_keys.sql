-- The PostgreSQL translation of migrations/sqlite/0005_service_keys.sql.
-- Service keys: a key may assert, per request, the workspace, user or team
-- it calls for (headers X-Sluice-Workspace, X-Sluice-User, X-Sluice-Team),
-- always within its own org.

ALTER TABLE api_keys ADD COLUMN may_assert TEXT NOT NULL DEFAULT '[]'; -- JSON array: workspace, user, team; empty asserts nothing
ALTER TABLE api_keys ADD COLUMN assert_workspaces TEXT NOT NULL DEFAULT '[]'; -- JSON array: exact names or prefixes ending in *; empty allows any
