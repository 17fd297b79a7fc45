package redisstore

import (
	"context"
	_ "embed"

	"github.com/redis/rueidis"
)

var (
	//go:embed prelude.lua
	preludeLua string
	//go:embed ops.lua
	opsLua string
	//go:embed sweep.lua
	sweepLua string
	//go:embed renew.lua
	renewLua string
)

// The scripts run by EVALSHA; rueidis falls back to EVAL (which caches the
// script again) when the server answers NOSCRIPT.
var (
	opsScript   = rueidis.NewLuaScript(preludeLua + opsLua)
	sweepScript = rueidis.NewLuaScript(preludeLua + sweepLua)
	renewScript = rueidis.NewLuaScript(preludeLua + renewLua)
)

// loadScripts loads every script on every server, so that the first
// admissions after a start need no EVAL fallback (on a Cluster, rueidis
// would otherwise load a script on one node and fall back to EVAL on the
// others).
func loadScripts(ctx context.Context, c rueidis.Client) error {
	for _, node := range c.Nodes() {
		for _, src := range []string{preludeLua + opsLua, preludeLua + sweepLua, preludeLua + renewLua, probeLua} {
			if err := node.Do(ctx, node.B().ScriptLoad().Script(src).Build()).Error(); err != nil {
				return err
			}
		}
	}
	return nil
}
