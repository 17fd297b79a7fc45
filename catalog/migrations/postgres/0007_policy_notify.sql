-- Every replica refreshes its policy as soon as a rule or an override changes, however it was
-- changed (the admin API, the CLI, or a statement run against the database by automation): each
-- statement that changes one of those tables notifies channel sluice_catalog with the schema of
-- the table, which Catalog.WatchPolicy listens for.
CREATE FUNCTION sluice_catalog_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('sluice_catalog', TG_TABLE_SCHEMA);
  RETURN NULL;
END
$$;

CREATE TRIGGER rules_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON rules
  FOR EACH STATEMENT EXECUTE FUNCTION sluice_catalog_changed();
CREATE TRIGGER overrides_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON overrides
  FOR EACH STATEMENT EXECUTE FUNCTION sluice_catalog_changed();
