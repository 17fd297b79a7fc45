-- SQLite has no notifications: Catalog.WatchPolicy polls PRAGMA data_version instead, which
-- changes when another connection (another process, or automation) commits. Kept so that both
-- dialects number their migrations alike.
SELECT 1;
