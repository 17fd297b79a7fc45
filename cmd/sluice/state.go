package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/sluicehq/sluice/store/pgstore"
	"github.com/sluicehq/sluice/store/redisstore"
	"github.com/sluicehq/sluice/store/sqlitestore"
)

// common are the flags every command that reads state takes. A flag set
// on the command line wins over its environment variable, which wins over
// the config file.
type common struct {
	configPath string
	// flags maps an environment variable to the flag value standing for it.
	flags map[string]*string
}

func (c *common) register(fs *flag.FlagSet) {
	c.flags = map[string]*string{}
	fs.StringVar(&c.configPath, "config", "", "YAML config file (default $SLUICE_CONFIG, or the embedded default)")
	c.flag(fs, "data", config.VarDataDir, "data directory for the embedded SQLite files (default ./.sluice)")
	c.flag(fs, "database", config.VarDatabase, "URL of keys, rules, ledger and audit (default SQLite under the data directory)")
}

// flag registers a string flag standing for environment variable v.
func (c *common) flag(fs *flag.FlagSet, name, v, help string) {
	c.flags[v] = fs.String(name, "", help+" ($"+v+")")
}

// env looks a variable up in the flags set, then in the environment.
func (c *common) env(name string) (string, bool) {
	if p, ok := c.flags[name]; ok && *p != "" {
		return *p, true
	}
	return os.LookupEnv(name)
}

// path is the config file: --config, else $SLUICE_CONFIG; empty for the
// embedded default.
func (c *common) path() string {
	if c.configPath != "" {
		return c.configPath
	}
	return os.Getenv("SLUICE_CONFIG")
}

// load reads the config, with flags over environment over file.
func (c *common) load() (*config.Config, error) {
	return config.Load(c.path(), c.env)
}

// sqlitePath returns the file of a sqlite:// URL, or def for "sqlite://".
func sqlitePath(url, def string) string {
	p := strings.TrimPrefix(url, "sqlite://")
	if p == "" {
		return def
	}
	return p
}

// pgStoreTimeout bounds each call of the gateway to a PostgreSQL store
// when the config's store_timeout does not.
const pgStoreTimeout = 400 * time.Millisecond

// openStore opens the counters' store named by cfg; log receives the
// store's warnings (a counter found out of bounds and repaired). A
// PostgreSQL store writes the records its settlements carry with rec, when
// rec is not nil (ledgerInStore).
func openStore(cfg *config.Config, log *slog.Logger, rec pgstore.Recorder) (sluice.Store, error) {
	url := cfg.StoreURL()
	switch {
	case url == "memory://" || strings.HasPrefix(url, "memory:"):
		return memstore.New(memstore.Options{}), nil
	case strings.HasPrefix(url, "sqlite://"):
		path := sqlitePath(url, filepath.Join(cfg.DataDir, "counters.db"))
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, err
		}
		// The gateway settles after the answer is sent, so settlements may
		// wait a couple of milliseconds to share a journal commit.
		return sqlitestore.Open(sqlitestore.Options{Path: path, HoldSettlements: true, Logger: log})
	case strings.HasPrefix(url, "redis://"), strings.HasPrefix(url, "rediss://"),
		strings.HasPrefix(url, "redis-cluster://"), strings.HasPrefix(url, "rediss-cluster://"):
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return redisstore.Open(ctx, redisstore.Options{URL: url, Logger: log, Timeout: cfg.StoreTimeout})
	case isPostgres(url):
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// An admission answers 503 within half a second of a stall, as
		// Redis's 250 ms does (the bound covers its wait in the group
		// commit's queue too). The server's statement_timeout is the
		// same bound: a statement stalled at the server (a lock, a paused
		// process) is cancelled rather than committed after the caller
		// gave up. One that committed anyway (its answer lost or late, or
		// held up in the network on its way) is released by the store.
		return pgstore.Open(ctx, pgstore.Options{URL: url, Timeout: cmp.Or(cfg.StoreTimeout, pgStoreTimeout), Logger: log, Recorder: rec})
	}
	return nil, fmt.Errorf("store %s: want sqlite://, memory://, redis://, redis-cluster:// or postgres://", redact(url))
}

// openCatalog opens the keys, ledger and audit database named by cfg.
func openCatalog(cfg *config.Config) (*catalog.Catalog, error) {
	url := cfg.DatabaseURL()
	switch {
	case strings.HasPrefix(url, "sqlite://"):
		path := sqlitePath(url, filepath.Join(cfg.DataDir, "catalog.db"))
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, err
		}
		return catalog.OpenSQLite(path, catalog.Options{CallRetention: cfg.Usage.CallRetentionOrOff()})
	case isPostgres(url):
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return catalog.OpenPostgres(ctx, url, catalog.Options{CallRetention: cfg.Usage.CallRetentionOrOff()})
	}
	return nil, fmt.Errorf("database %s: want sqlite://, postgres:// or postgresql://", redact(url))
}

func isPostgres(url string) bool {
	return strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://")
}

var _ pgstore.Recorder = (*catalog.Catalog)(nil)

// ledgerInStore returns the Recorder with which a PostgreSQL counter store
// in the catalog's database (another schema of it included) writes the
// ledger in the commit of each settlement, so that kill -9 leaves ledger
// and counters equal; nil for any other store, whose settlements the
// ledger journals after they are durable.
func ledgerInStore(cfg *config.Config, cat *catalog.Catalog, log *slog.Logger) pgstore.Recorder {
	url := cfg.StoreURL()
	if !isPostgres(url) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shared, err := cat.SharesDatabase(ctx, url)
	if err != nil {
		log.Warn("cannot tell whether the counter store is in the catalog's database: the ledger is journaled after each settlement", "err", err)
		return nil
	}
	if !shared {
		return nil
	}
	log.Info("the counter store is in the catalog's database: the ledger is written in the commit of each settlement")
	return cat
}

// redact hides a URL's password.
func redact(url string) string {
	at := strings.LastIndex(url, "@")
	scheme := strings.Index(url, "://")
	if at < 0 || scheme < 0 {
		return url
	}
	creds := url[scheme+3 : at]
	if i := strings.Index(creds, ":"); i >= 0 {
		return url[:scheme+3] + creds[:i] + ":xxxxx" + url[at:]
	}
	return url
}
