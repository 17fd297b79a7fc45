package main

import (
	"flag"
	"fmt"
)

// migrate applies the schema migrations of the catalog and of the store
// named by the config, and exits. sluice serve applies them on start too;
// this lets an operator run them once, before rolling out replicas.
func migrate(args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	var c common
	c.register(fs)
	c.flag(fs, "store", "SLUICE_STORE", "URL of counters and reservations")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := c.load()
	if err != nil {
		return err
	}
	// Opening runs the migrations (under an advisory lock on PostgreSQL,
	// so replicas starting together migrate once) and refuses a schema
	// newer than this build.
	cat, err := openCatalog(cfg)
	if err != nil {
		return fmt.Errorf("catalog: %w", err)
	}
	if err := cat.Close(); err != nil {
		return err
	}
	store, err := openStore(cfg, newLogger(cfg), nil)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if err := store.Close(); err != nil {
		return err
	}
	fmt.Printf("migrated: catalog %s, store %s\n", redact(cfg.DatabaseURL()), redact(cfg.StoreURL()))
	return nil
}
