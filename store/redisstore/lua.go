package redisstore

import (
	_ "embed"

	"github.com/redis/rueidis"
)

var (
	//go:embed prelude.lua
	preludeLua string
	//go:embed admit.lua
	admitLua string
	//go:embed settle.lua
	settleLua string
	//go:embed sweep.lua
	sweepLua string
)

// The scripts run by EVALSHA; rueidis falls back to EVAL (which caches the
// script again) when the server answers NOSCRIPT.
var (
	admitScript  = rueidis.NewLuaScript(preludeLua + admitLua)
	settleScript = rueidis.NewLuaScript(preludeLua + settleLua)
	sweepScript  = rueidis.NewLuaScript(preludeLua + sweepLua)
)

// Modes of the admission script.
const (
	modeAdmit = "0"
	modeCheck = "1"
	modePeek  = "2"
)

// Charge kinds in script arguments.
const (
	kindRate        = "1"
	kindBudget      = "2"
	kindConcurrency = "3"
)
