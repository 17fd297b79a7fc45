package main

import (
	"log/slog"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/gateway/respcache"
	"github.com/sluicehq/sluice/store/redisstore"
)

// cacheOf is the response cache's store: nil when no model keeps its
// answers; in Redis, shared by every replica, when the counters are there;
// otherwise in the process's memory. With PostgreSQL alone the cache stays
// in memory: a table would put every hit's answer through the database
// that serializes the admissions, to save each replica a miss of its own.
func cacheOf(cfg *config.Config, store sluice.Store, log *slog.Logger) gateway.CacheStore {
	if !cacheOn(cfg) {
		return nil
	}
	if rs, ok := store.(*redisstore.Store); ok {
		log.Info("response cache in Redis, shared by every replica")
		return respcache.NewRedis(rs.Client(), respcache.RedisOptions{})
	}
	log.Info("response cache in memory", "max_bytes", cacheMaxBytes(cfg))
	return respcache.NewMemory(respcache.MemoryOptions{MaxBytes: cacheMaxBytes(cfg)})
}

func cacheMaxBytes(cfg *config.Config) uint64 {
	if cfg.Cache.MaxBytes > 0 {
		return uint64(cfg.Cache.MaxBytes)
	}
	return respcache.DefaultMaxBytes
}

// cacheOn reports whether a model keeps its answers.
func cacheOn(cfg *config.Config) bool {
	for _, m := range cfg.Models {
		if m.Cache != nil {
			return true
		}
	}
	return false
}

// watchCache lets the admin API purge g's response cache, when it has one.
func (o *observability) watchCache(cfg *config.Config, g *gateway.Gateway) {
	if cacheOn(cfg) {
		o.purgeCache = g.PurgeCache
	}
}
