// Package redisstore is a sluice.Store over Redis, standalone or Cluster,
// for several replicas sharing counters.
//
// # One round trip per admission
//
// Admit sends one operation that checks every charge of the batch and
// applies all of them or none, inside a Lua script (EVALSHA, reloaded by EVAL
// when the server lost its script cache) that gives each key it writes its
// lifetime in the same script. Settle sends one more. Time is the server's
// (Redis TIME, in microseconds), so replicas with skewed clocks agree;
// Options.PinTime makes the scripts use the time the caller passes instead,
// for tests.
//
// Operations on one hash slot go through a lane: while a batch of them is in
// flight, the operations that concurrent callers send meanwhile wait and go
// together in the next script call (a group commit; two batches in flight
// per lane). The script applies them in order, each as if alone, reading a
// counter once and writing it once per batch. An operation alone goes at
// once. Each operation is still one round trip for its caller, and a whole
// batch is atomic.
//
// Keys are named prefix:{tenant}:..., where the tenant is
// Options.TenantOf(key) (by default the first part of the subject), so the
// counters of one tenant share a hash slot and tenants spread over a Redis
// Cluster. On a standalone server a batch of charges is always one
// operation. On a Cluster, a batch whose keys fall in several slots (a
// global rule beside a per-tenant rule, or a key rule beside a workspace
// rule of another tenant) is admitted in steps, one operation per slot: the
// tenant slots first, the global slot last. When a later step refuses, the
// earlier steps are compensated (their charges released, as by a
// settlement). In the window between a step and its compensation, a round
// trip or two, the earlier step's charges are held: another request may be
// refused for room that is about to be given back, never admitted beyond a
// limit. If the compensation itself fails, leases expire at the batch's
// deadline and budget reservations are settled by Sweep per their expiry
// policy.
//
// # Reservations and the sweep
//
// Every admitted slot group of a batch that holds budget charges has a
// reservation record (its budget charges and leases, what the sweep needs),
// kept as a member of its slot's deadline index, a sorted set scored by
// deadline. Settle and Sweep both remove the record inside their script,
// and only the one that removed it applies the settlement: a reservation is
// settled once, however many replicas sweep at the same time. Concurrency
// leases are sorted sets scored by expiry; expired leases are dropped by the
// admission script, so the slots of a crashed holder free themselves at the
// deadline, swept or not. RenewLeases (renew.lua) moves a group's record and
// leases to a later score, never back, and leaves alone what is gone or
// past its deadline. A group of rate charges and leases only has no
// record: freeing a lease is idempotent, and a rate refund or overrun is
// applied by Settle directly (the Limiter settles a reservation once; a
// settlement retried after a timeout may move a bucket twice, within its
// bounds). On a Cluster each slot has its own deadline index; Sweep finds
// those that hold records with one read-only script per master, which reads
// the indexes of the slots that master serves (keys of many slots of one
// node, which Redis allows a script without flags), or, when that fails,
// with pipelined ZCARDs of every slot's index.
//
// # Exact arithmetic in Lua
//
// Lua numbers are doubles, and operations reach the scripts packed as
// binary doubles, each holding an integer below 2^53 exactly, read by one
// struct.unpack call per operation (no decimal parsing; in Redis's Lua every
// call into C and every decoded field costs hundreds of instructions). A
// rate bucket is kept as its
// theoretical arrival time in Unix microseconds plus a fraction frac/L,
// where the refill is W microseconds per L units (the window and the limit
// divided by their greatest common divisor), so every value stays an
// integer below 2^53. A rate rule needs burst×W <= 2^50 and L <= 2^50: any
// limit per minute up to 18 million; 1,000,000 per day (W = 86,400, L = 1);
// not 1,000,003 per day. Budgets and their charges must stay below 2^51
// (2.2e15 tokens or micro-dollars). A rule beyond these bounds is refused
// with ErrPrecision, never rounded; Check tells at configuration time.
// Budget counters saturate at 2^53 (sluice.CounterCeiling: shadow charges
// and overruns have no other bound), so a stored figure is always an exact
// integer. A budget hash holding a figure out of bounds (negative,
// fractional, past 2^53, not a number: written by a version before
// counters saturated) is repaired by the first script that reads it, its
// usage set to the ceiling (only an overflowed sum gets there: the budget
// is spent until its period ends), and the store logs one warning naming
// the key (Options.Logger). Redis is never scanned for them.
// Results have microsecond resolution: RetryAfter and ResetAt are rounded up
// to the next microsecond (the Limiter rounds retry hints up to the
// millisecond anyway).
//
// # Durability and outages
//
// Budgets kept in Redis are as durable as the server's persistence: without
// AOF (appendfsync everysec or always) a restart loses the period's usage,
// and a failover to a replica loses what was not yet replicated. Pair the
// Redis store with PostgreSQL for the usage ledger (shared/DESIGN.md,
// section 2). Every call is bounded by Options.Timeout (250 ms): a slow or
// dead server is an error (which the Limiter reports as store unavailable),
// never a hang, and admissions succeed again when the server returns,
// without reopening the Store.
//
// # Admissions whose caller gave up
//
// An admission that timed out (or whose context ended) may still be in a
// socket, and Redis runs it when it resumes after a stall; nobody would
// settle it. It holds nothing afterwards:
//
//   - Each admission carries the time its caller stops waiting, in the
//     server's clock: the local time plus a bound of how far the server's
//     clock is ahead, taken from the store's own replies (the server's TIME
//     minus the local time the request was sent, never less than the true
//     offset), per slot. The script refuses an admission that comes later.
//     Skew between the hosts' clocks does not matter; a refusal means the
//     caller has surely given up.
//   - When the caller gives up, the store also sends a cancellation by
//     admission ID (from a goroutine of its own, again until Redis answers,
//     at most until the batch's deadline). It applies only once the
//     server's clock is past the give-up time (before, it is sent again just
//     after), and only if the admission was applied: its reservation record
//     is there or, without one, its first lease. Then it releases every
//     charge as a settlement with nothing used would. Scripts run one at a
//     time and TIME goes forward, so either the admission ran before the
//     cancellation, which undoes it if it was applied and does nothing
//     otherwise (a refused admission is never refunded), or it runs after
//     and is refused, whichever connections the two travel on and in
//     whichever order they arrive.
//
// Limits: a group of rate charges only (no budget, no concurrency cap in
// its slot) has nothing that tells whether it was applied, so it is not
// cancelled: one applied before its give-up time whose answer was lost keeps
// its rate charge until it refills. A cancellation that cannot reach Redis
// before the batch's deadline (or that the Store's Close abandons, or past
// 10,000 outstanding) leaves the leases to expire and the budget
// reservation to the sweep, as before. The proof needs the server's clock
// not to step back between the two scripts, and on a Cluster the slot not
// to move to another master between them. Stats counts late refusals seen,
// phantoms undone and cancellations abandoned.
//
// # Deny cache
//
// With Options.DenyCache, a rate charge refused with RetryAfter d is refused
// locally for d, and a budget refused until the end of its period is
// refused locally until then (at most Options.DenyCacheMaxAge), for charges
// of the same key at least as large: a hot refused key stops costing Redis a
// round trip. Room given back by a settlement on another replica in that
// time is not seen until the entry expires. Concurrency refusals are never
// cached (a settlement frees a slot at any moment).
package redisstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluicehq/sluice"
)

// Client choice: rueidis. Measured on the 2-core development machine with the
// same GCRA Lua script run by 32 concurrent callers against one Redis 7:
// go-redis v9.23.0 (connection pool) 29,000 to 37,000 scripts/s, rueidis
// v1.0.79 (auto-pipelining) 50,000 to 59,000 scripts/s. Pipelining the
// concurrent callers' commands into few writes and reads is what an
// admission path under load needs; rueidis also routes scripts by key slot
// on a Cluster, exposes each node (for the sweep's probe) and reloads a
// script on NOSCRIPT.

var _ sluice.Store = (*Store)(nil)

// ErrPrecision is returned for a rule whose arithmetic would not be exact in
// Lua's doubles (see the package documentation for the bounds).
var ErrPrecision = errors.New("redisstore: rule beyond exact Lua arithmetic")

// Options configures a Store. URL or Client is required; every other zero
// value is a documented default.
type Options struct {
	// URL is redis://[user:password@]host:port[/db] (rediss:// for TLS) for
	// a standalone server, or redis-cluster://[user:password@]h1:p1,h2:p2,...
	// (rediss-cluster:// for TLS) for a Redis Cluster.
	URL string
	// Client, if set, is used instead of dialling URL; Close leaves it open.
	Client rueidis.Client
	// Prefix starts every key (default "sluice"). It must not contain braces.
	Prefix string
	// TenantOf names the tenant of a counter, whose keys share a hash slot
	// (default DefaultTenantOf). It must return the same tenant for a key
	// every time.
	TenantOf func(sluice.CounterKey) string
	// Timeout bounds every call to Redis (default 250 ms).
	Timeout time.Duration
	// PinTime makes the scripts use the time passed by the caller instead of
	// the server's clock. For tests driven by a manual clock only: replicas
	// with skewed clocks would disagree.
	PinTime bool
	// DenyCache refuses locally, without a round trip, the charges of keys
	// refused recently (see the package documentation).
	DenyCache bool
	// DenyCacheMaxAge caps how long a budget refusal is cached (default 10
	// seconds), so that refunds and raised limits are seen that soon.
	DenyCacheMaxAge time.Duration
	// DenyCacheSize caps the number of keys the deny cache holds (default
	// 65,536).
	DenyCacheSize int
	// Logger receives a warning for each budget counter the scripts find
	// out of bounds and repair; nil means slog.Default().
	Logger *slog.Logger
}

// Stats counts a Store's events since it was opened.
type Stats struct {
	// DenyCacheHits counts admissions refused by the deny cache.
	DenyCacheHits int64
	// SplitAdmissions counts batches admitted in several steps (Cluster).
	SplitAdmissions int64
	// Compensations counts steps released because a later step refused.
	Compensations int64
	// LateAdmissions counts admissions that reached Redis after their
	// caller had given up, refused there.
	LateAdmissions int64
	// Phantoms counts admissions applied although their caller had given
	// up, undone by their cancellation.
	Phantoms int64
	// CancelsAbandoned counts cancellations given up (the Store closed, the
	// batch's deadline passed, or too many outstanding): their admissions,
	// if applied, hold their leases until the deadline and their budget
	// reservations until the sweep.
	CancelsAbandoned int64
}

// Store is a sluice.Store over Redis. It is safe for concurrent use.
type Store struct {
	client    rueidis.Client
	ownClient bool
	cluster   bool
	prefix    string
	tenantOf  func(sluice.CounterKey) string
	timeout   time.Duration
	pinTime   bool
	deny      *denyCache
	lanes     lanes
	keysMu    sync.RWMutex
	keys      map[cacheKey]*cachedKey
	// nonce distinguishes this Store's lease members from another process's
	// batch of the same ID.
	nonce string
	// clock bounds the server's clock offset for slots not heard from.
	clock clockOffset
	log   *slog.Logger

	// Cancellations of admissions whose callers gave up run on goroutines
	// of their own until Close.
	cancelWG  sync.WaitGroup
	cancels   atomic.Int64
	closing   chan struct{}
	stopCtx   context.Context
	stop      context.CancelFunc
	closeOnce sync.Once

	denyHits, split, compensations, late, phantoms, abandoned atomic.Int64
}

// DefaultTenantOf returns the tenant of a counter, its hash tag: the org
// that qualifies the first part of its subject (the parts of a composite
// subject are joined by 0x1f, a value is joined to its org by 0x1e), or
// that first part itself when it has no org: the workspace of a
// workspace+user rule in the default org, the key of a key rule, "" for a
// global rule. So every counter of one org's workspaces, teams and users
// shares a slot, and orgs spread over a Cluster's masters.
func DefaultTenantOf(k sluice.CounterKey) string {
	first := k.Subject
	if i := strings.IndexByte(first, 0x1f); i >= 0 {
		first = first[:i]
	}
	if i := strings.IndexByte(first, 0x1e); i >= 0 {
		return first[:i]
	}
	return first
}

// Open connects to the server named by opts.URL (or uses opts.Client) and
// returns a Store. It fails when the URL is malformed, the server cannot be
// reached within the timeout, or the URL's kind does not match the server
// (redis:// to a Cluster node, redis-cluster:// to a standalone server).
func Open(ctx context.Context, opts Options) (*Store, error) {
	s := &Store{client: opts.Client, prefix: opts.Prefix, tenantOf: opts.TenantOf, timeout: opts.Timeout, pinTime: opts.PinTime,
		keys: map[cacheKey]*cachedKey{}, closing: make(chan struct{}), log: opts.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.stopCtx, s.stop = context.WithCancel(context.Background())
	if s.prefix == "" {
		s.prefix = "sluice"
	}
	if strings.ContainsAny(s.prefix, "{}") {
		return nil, fmt.Errorf("redisstore: open: prefix %q contains a brace", s.prefix)
	}
	if s.tenantOf == nil {
		s.tenantOf = DefaultTenantOf
	}
	if s.timeout <= 0 {
		s.timeout = 250 * time.Millisecond
	}
	if opts.DenyCache {
		s.deny = newDenyCache(opts.DenyCacheMaxAge, opts.DenyCacheSize)
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	s.nonce = string(nonce[:])

	wantCluster := false
	if s.client == nil {
		co, cluster, err := clientOption(opts.URL)
		if err != nil {
			return nil, err
		}
		wantCluster = cluster
		co.Dialer.Timeout = s.timeout
		co.ConnWriteTimeout = max(4*s.timeout, time.Second)
		co.DisableCache = true
		co.ForceSingleClient = !cluster
		client, err := rueidis.NewClient(co)
		if err != nil {
			return nil, fmt.Errorf("redisstore: open %s: %w", redactURL(opts.URL), err)
		}
		s.client, s.ownClient = client, true
	} else {
		wantCluster = opts.Client.Mode() == rueidis.ClientModeCluster
	}
	s.cluster = s.client.Mode() == rueidis.ClientModeCluster
	s.lanes = make(lanes, 1)
	if s.cluster {
		s.lanes = make(lanes, slots)
	}
	if err := s.checkServer(ctx, wantCluster); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// checkServer fails when the server is not of the kind the URL names.
func (s *Store) checkServer(ctx context.Context, wantCluster bool) error {
	if wantCluster && !s.cluster {
		return errors.New("redisstore: open: redis-cluster:// names a server that is not a Redis Cluster (use redis://)")
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := loadScripts(ctx, s.client); err != nil {
		return fmt.Errorf("redisstore: open: load scripts: %w", err)
	}
	if err := s.seedClock(ctx); err != nil {
		return fmt.Errorf("redisstore: open: read the server's clock: %w", err)
	}
	if s.cluster {
		return nil
	}
	info, err := s.client.Do(ctx, s.client.B().Info().Section("cluster").Build()).ToString()
	if err != nil {
		return fmt.Errorf("redisstore: open: %w", err)
	}
	if strings.Contains(info, "cluster_enabled:1") {
		return errors.New("redisstore: open: redis:// names a Redis Cluster node (use redis-cluster://host:port,...)")
	}
	return nil
}

// Ping reports whether Redis answers (every node of a Cluster), within
// the store's timeout: for a readiness check.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	for addr, node := range s.client.Nodes() {
		if err := node.Do(ctx, node.B().Ping().Build()).Error(); err != nil {
			return fmt.Errorf("redisstore: ping %s: %w", addr, err)
		}
	}
	return nil
}

// Close abandons the cancellations still outstanding and closes the
// connection to Redis, unless it came from Options.Client.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.closing)
		s.stop()
		s.cancelWG.Wait()
		if s.ownClient {
			s.client.Close()
		}
	})
	return nil
}

// Stats returns the Store's counts.
func (s *Store) Stats() Stats {
	return Stats{DenyCacheHits: s.denyHits.Load(), SplitAdmissions: s.split.Load(), Compensations: s.compensations.Load(),
		LateAdmissions: s.late.Load(), Phantoms: s.phantoms.Load(), CancelsAbandoned: s.abandoned.Load()}
}

// Cluster reports whether the Store talks to a Redis Cluster.
func (s *Store) Cluster() bool { return s.cluster }

// call bounds ctx by the Store's timeout.
func (s *Store) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// scriptNow is the time argument of a script: the caller's now when pinned,
// empty for the server's TIME.
func (s *Store) scriptNow(now time.Time) string {
	if s.pinTime {
		return strconv.FormatInt(now.UnixMicro(), 10)
	}
	return ""
}

// Client returns the store's Redis client, for another user of the same
// server (the gateway's response cache); it is closed with the store when
// the store opened it.
func (s *Store) Client() rueidis.Client { return s.client }
