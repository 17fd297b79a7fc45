// Package gateway is Sluice's HTTP proxy in front of OpenAI- and
// Anthropic-compatible providers: it authenticates a request from its key
// record, bounds its cost from the body, admits it through the limiter
// before the model is called, forwards it, streams the answer back chunk by
// chunk, and settles the usage the provider reported.
//
// The server and the upstream client are fasthttp's: the gateway sits on
// every call's path, and fasthttp costs a fraction of net/http's CPU per
// proxied request (see BENCHMARKS.md).
package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway/event"
	"github.com/sluicehq/sluice/retry"
	"github.com/sluicehq/sluice/store/memstore"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Principal is who an API key belongs to, from its trusted record.
type Principal struct {
	KeyID         string
	Org           string
	Workspace     string
	Team          string
	User          string
	Tier          string
	AllowedModels []string
	// Assert makes the key a service key: the attributes (AssertWorkspace,
	// AssertUser, AssertTeam) it may set per request with HeaderWorkspace,
	// HeaderUser and HeaderTeam, within its own Org. Empty: the headers
	// are ignored.
	Assert []string
	// AssertWorkspaces limits the workspaces a service key may assert:
	// each an exact name or a prefix ending in "*". Empty: any.
	AssertWorkspaces []string
	// Class is the priority class of the key's requests on rules with
	// classes. Empty: its tier's (Options.TierClass), else the rule's
	// default class.
	Class string
	// MaxWait bounds how long the key's requests may wait for rate and
	// concurrency rules. Zero: its tier's (Options.TierMaxWait), else
	// BatchMaxWait.
	MaxWait time.Duration
	// Turns lets the key group its calls into turns with HeaderTurn (its
	// own setting, or its tier's): without it the header is ignored and
	// every call charged, so that no client can multiply its request rate
	// by sending one turn id.
	Turns bool
	// NoCache keeps the key's calls out of the response cache: they
	// never read nor write it.
	NoCache bool
}

// ErrBadKey is returned by an Authenticator for a key that is unknown,
// malformed, revoked or expired.
var ErrBadKey = errors.New("gateway: invalid API key")

// Authenticator resolves an API key to its principal. Any error other than
// ErrBadKey is treated as the key store being unavailable.
type Authenticator interface {
	Authenticate(ctx context.Context, secret string) (Principal, error)
}

// A CachedAuthenticator is an Authenticator that can answer some secrets
// without I/O, from memory (a cache of the keys in steady use, a secret
// that cannot be a key). The gateway asks AuthenticateCached first, and
// bounds by Options.CatalogTimeout only the lookups it leaves to
// Authenticate.
type CachedAuthenticator interface {
	Authenticator
	// AuthenticateCached answers as Authenticate would, when it can
	// without I/O; ok is false (and the error nil) when it cannot.
	AuthenticateCached(secret string) (_ Principal, ok bool, _ error)
}

// UsageRecord is one settled call, for the usage ledger: counters only,
// never a prompt or an answer.
type UsageRecord struct {
	At time.Time
	// Org is the org of Workspace.
	Org       string
	Workspace string
	Route     string
	Model     string
	// Provider names the provider of the deployment that served the call.
	Provider          string
	InputTokens       int64
	OutputTokens      int64
	CachedInputTokens int64
	Cost              int64
	Tags              []string
	// KeyID, User and Team attribute the call to the key that made it and
	// the user and team it was made for (asserted ones included).
	KeyID string
	User  string
	Team  string
	// RequestID is the call's X-Request-Id.
	RequestID string
	// Estimated: no usage (or none possible) was reported, so the
	// reservation was charged.
	Estimated bool
	// Reserved is what admission reserved for the call.
	Reserved sluice.Usage
	// CacheHit marks a call answered from the response cache: its usage
	// is zero (each rule charged it per its cache_hits), and CacheSaved is
	// the cost in micro-dollars of the call whose answer it replayed.
	CacheHit   bool
	CacheSaved int64
	// SessionID is the Sluice session the call was charged to (its
	// X-Sluice-Session, or the session a live connection's client secret
	// was minted with); empty outside a session.
	SessionID string
	// ConnectionID is, for a live connection (whose own record carries
	// its seconds' call) and each response made on it, the connection's
	// request id; empty for an HTTP call.
	ConnectionID string
	// AudioInputTokens and AudioOutputTokens are the audio parts of
	// InputTokens and OutputTokens (a live response's speech).
	AudioInputTokens, AudioOutputTokens int64
}

// UsageRecorder receives settled usage. RecordUsage is called on the
// request's path and must not block.
type UsageRecorder interface {
	RecordUsage(UsageRecord)
}

// A SettlementRecorder is a UsageRecorder that can have the limit store
// write a call's record in the commit of the call's settlement (a ledger
// in the counters' database), so that the two agree whatever happens to
// the process. Attach returns the context to settle with, carrying u, and
// a function that tells, once a settlement with that context succeeded,
// whether the store took u; when it did not (the settlement never reached
// the store), or when taken is nil (the recorder does not attach records),
// RecordUsage is called as for any UsageRecorder. A settlement that fails
// took nothing: u goes with its retries, and a reservation never settled
// is the sweep's to record.
type SettlementRecorder interface {
	UsageRecorder
	Attach(ctx context.Context, u UsageRecord) (_ context.Context, taken func() bool)
}

// Model is a model the gateway serves.
type Model struct {
	Name string
	// Provider names the Provider that serves it, unless Deployments
	// are set.
	Provider string
	// UpstreamName is the name sent to the provider; empty means Name.
	UpstreamName string
	// Deployments, when set, are the places the model is served from,
	// in place of Provider: each call goes to the one with the most room
	// left and a closed circuit, the next tried when it fails before the
	// first byte. Rules on the model count the calls of all of them.
	Deployments     []Deployment
	Price           sluice.Price
	MaxOutputTokens int64
	ContextWindow   int64
	// Tokenizer, when set, counts prompts as the provider does: a prompt
	// certainly longer than ContextWindow is refused 400
	// context_length_exceeded once admitted, before it is forwarded, and
	// nothing is charged (see checkContext). Nil
	// checks nothing.
	Tokenizer Tokenizer
	Aliases   []string
	// Fallbacks are tried in order when this model's own rules refuse or its
	// provider fails before the first byte.
	Fallbacks []string
	// CacheTTL, when positive, keeps the model's answers in the response
	// cache (Options.Cache) that long.
	CacheTTL time.Duration
}

// TenantModel is a logical model name served by a different model per
// tenant (see Options.TenantModels).
type TenantModel struct {
	Name string
	// Default serves the identities no route matches; empty means the
	// name does not exist for them (404 model_not_found).
	Default string
	Routes  []TenantRoute
}

// TenantRoute serves Model to the identities with every attribute it
// names. Workspace is matched within Org.
type TenantRoute struct {
	Org, Workspace, Tier string
	// Model names a Model, by name or alias.
	Model string
}

// Provider kinds.
const (
	KindOpenAI           = "openai"
	KindAnthropic        = "anthropic"
	KindOpenAICompatible = "openai-compatible"
	// KindAzure is Azure OpenAI: the api-key header, and with APIVersion
	// the deployment URLs ({base}/openai/deployments/{upstream model}/...
	// ?api-version=...); without, the v1 API at a base URL ending in
	// /openai/v1, the model in the body as with OpenAI.
	KindAzure = "azure"
	KindMock  = "mock"
)

// Provider is an upstream API.
type Provider struct {
	Name string
	Kind string
	// BaseURL is what the API's paths are appended to, as in the official
	// SDKs: https://api.openai.com/v1 for OpenAI and OpenAI-compatible
	// servers (the /v1 of the route is not repeated), the host root for
	// Anthropic (https://api.anthropic.com) and the mock.
	BaseURL string
	// APIKey authenticates the gateway to the provider.
	APIKey string
	// Organization and Project, when set on an OpenAI or OpenAI-compatible
	// provider, are sent as the OpenAI-Organization and OpenAI-Project
	// headers. The client's own headers of those names are never
	// forwarded: the operator's account decides which project pays.
	Organization, Project string
	// APIVersion, on an Azure provider, selects its deployment URLs and is
	// sent as their api-version.
	APIVersion string
	// OutputCapField, when "max_tokens" on an OpenAI-compatible provider,
	// makes every chat call it is sent carry its output cap in max_tokens
	// (as well as max_completion_tokens when the client sent that), for a
	// server that reads only the older name.
	OutputCapField string
	// Pace holds a call, per model, while the provider's own rate-limit
	// headers (OpenAI's x-ratelimit-*, Anthropic's anthropic-ratelimit-*)
	// and its last 429's retry-after say it would refuse it, for up to
	// Options.PaceMaxWait; a longer wait is refused 429 with Retry-After
	// (or sent to the model's next fallback) without calling the provider.
	Pace bool
	// RequestsPerMinute and TokensPerMinute, when set, are the provider's
	// limits per model as the operator knows them, in force until its
	// own rate-limit headers say otherwise: the gateway counts the calls
	// it sends against them, to pace (with Pace) and to choose among a
	// model's deployments by the room left.
	RequestsPerMinute, TokensPerMinute int64
	// CircuitFailures is how many attempts in a row on one of the
	// provider's models (a deployment) fail, by a connection error, a
	// timeout or a 5xx, before its circuit opens and the deployment is
	// skipped like a refusing model (5); CircuitCooldown is how long until
	// one probe is let through, whose success closes it (30 s).
	CircuitFailures int
	CircuitCooldown time.Duration
}

// Options configures a Gateway. Limiter, Keys, Models and Providers are
// required.
type Options struct {
	Limiter   *sluice.Limiter
	Keys      Authenticator
	Usage     UsageRecorder
	Models    []Model
	Providers []Provider
	// TenantModels are names a client may ask for that serve, per tenant,
	// one of Models: the route most specific to the key's identity wins
	// (org and workspace, then org, then tier; naming the tier too breaks
	// ties), else the default. Rules on models count the model served.
	TenantModels []TenantModel
	// MaxBodyBytes caps a request body (8 MiB).
	MaxBodyBytes int
	// MaxConcurrentCounts bounds the prompts counted against a context
	// window at once (see Model.Tokenizer): counting a long prompt costs
	// CPU by the megabyte, so calls that may (admitted, each a window's
	// worth at most) take turns on this many slots and leave the rest of
	// the CPUs to everyone else. 0 means half of GOMAXPROCS, at least 1.
	MaxConcurrentCounts int
	// MaxConns caps the client connections Server holds at once; one
	// more is answered 503 and closed (0: fasthttp's 262,144).
	// MaxConnsPerIP caps them per client address, 429 past it (0: half of
	// MaxConns, so that no one address holds every place; none without
	// MaxConns). The caps are Listener's, in the API's error shape with
	// Retry-After; Server alone has fasthttp's, in plain text.
	MaxConns, MaxConnsPerIP int
	// HeaderTimeout is how long a connection may take to send a request's
	// headers, the first or the next on a kept-alive connection (10 s):
	// a connection that never sends one holds a descriptor that long, not
	// the minute a body may take.
	HeaderTimeout time.Duration
	// Dependencies are checked by CheckDependencies for /readyz.
	Dependencies []Dependency
	// TerminalStatus is the status of budget and session-ceiling refusals
	// (and of a provider's quota error passed on): TerminalAuto (the
	// default: 429, or 402 to clients that retry every 429), Terminal429,
	// Terminal402 or Terminal400. The body and x-should-retry: false are
	// the same whatever the status.
	TerminalStatus string
	// SettleRetryBase is the first wait before a failed settlement is
	// tried again (100 ms; doubling to 5 s, until the reservation's
	// deadline).
	SettleRetryBase time.Duration
	// CatalogTimeout bounds every call to the key store (a request's key,
	// or a JWT issuer's keys) and the session store (250 ms); past it the
	// request is answered 503 key_store_unavailable or
	// session_store_unavailable rather than left waiting on a stalled
	// database.
	CatalogTimeout time.Duration
	// RequestTimeout bounds a call upstream; leases and reservations
	// expire after it (10 minutes).
	RequestTimeout time.Duration
	// UpstreamRetries is how many times a provider 429, 5xx or connection
	// error is retried before the first byte reaches the client (2).
	UpstreamRetries int
	// RetryBase and RetryMax bound the backoff between upstream attempts
	// (100 ms and 2 s), with full jitter.
	RetryBase, RetryMax time.Duration
	// BatchMaxWait is how long a request marked X-Sluice-Priority: batch may
	// wait for rate and concurrency rules (30 seconds).
	BatchMaxWait time.Duration
	// TierMaxWait replaces BatchMaxWait for the keys of a tier, by tier
	// name; a key's own Principal.MaxWait replaces both.
	TierMaxWait map[string]time.Duration
	// TierClass is the priority class of the requests of a tier, by tier
	// name; a key's own Principal.Class replaces it.
	TierClass map[string]string
	// PaceMaxWait is the longest a paced provider's call is held (10 s).
	PaceMaxWait time.Duration
	// TrustedProxies are the peers whose X-Forwarded-For is believed for
	// the ip subject; empty believes none.
	TrustedProxies []netip.Prefix
	// PreAuthPerMinute, when positive, bounds the requests of one client
	// address before its key is even looked at: a loose backstop against
	// floods and key guessing, kept by each replica in its own memory
	// (rule pre_auth_per_ip). Many users may share an address behind a
	// NAT, so it is not a per-user limit. 0 turns it off.
	PreAuthPerMinute int64
	Logger           *slog.Logger
	// Sessions, when set, serves POST /v1/sessions and GET and DELETE
	// /v1/sessions/{id}, and charges calls carrying X-Sluice-Session to
	// their session.
	Sessions *Sessions
	// Observer, if set, is told about every request; it must not block.
	Observer func(Event)
	// TracerProvider, when set, traces every call: a span per request
	// (continuing the client's traceparent) with children for
	// authentication, admission, the upstream call and settlement. Nil
	// is tracing off, at no cost per call.
	TracerProvider trace.TracerProvider
	// Propagator reads the client's trace context and writes the
	// upstream call's (nil: W3C traceparent and tracestate). Without a
	// TracerProvider the client's traceparent and tracestate are passed
	// on as they came.
	Propagator propagation.TextMapPropagator
	// OnDependency, if set, is told when a dependency (a store, the
	// catalog, a provider) goes down or comes back; it must not block.
	OnDependency func(DependencyChange)
	// Clock tells the gateway the time and runs its timers (nil: real
	// time). The Limiter has its own (sluice.Options.Clock): a test that
	// moves one moves both.
	Clock Clock
	// Cache keeps the answers of the models with a CacheTTL (the response
	// cache, cache.go); nil keeps none. CacheMaxEntryBytes caps one kept
	// answer (0: DefaultCacheMaxEntryBytes); a larger one is not kept.
	Cache              CacheStore
	CacheMaxEntryBytes int

	// LiveMaxDuration is the longest a live connection (GET /v1/realtime)
	// stays open without a session whose wall clock ends it sooner (60
	// minutes, the Realtime API's own cap); it then closes with 1000.
	LiveMaxDuration time.Duration
	// LiveMaxFrameBytes caps a client event of a live connection (1 MiB,
	// about 16 s of audio per input_audio_buffer.append); a larger frame
	// closes the connection with 1009.
	LiveMaxFrameBytes int
	// LiveSecretKey seals the client secrets of POST
	// /v1/realtime/client_secrets (AES-256-GCM under a key derived from
	// it); replicas must share it (empty: a random key of this process,
	// whose secrets no other replica takes).
	LiveSecretKey []byte
	// LiveWriteTimeout is how long a write to either side of a live
	// connection may wait for its peer to read (10 s): a peer that does
	// not read is closed, so a connection buffers at most one frame on its
	// way, never an unbounded queue.
	LiveWriteTimeout time.Duration
}

// Event describes one finished client request, for metrics and logs.
type Event = event.Event

// SessionUsage is what a session used.
type SessionUsage = event.SessionUsage

// Gateway serves the client API. It is safe for concurrent use.
type Gateway struct {
	opts      Options
	limiter   *sluice.Limiter
	models    map[string]*model
	modelList []*model
	providers map[string]*provider
	log       *slog.Logger
	inFlight  inFlight
	draining  atomic.Bool
	ready     readiness
	// preAuth counts requests per client address before authentication;
	// nil when Options.PreAuthPerMinute is 0.
	preAuth *sluice.Limiter
	// after runs the settlements of the calls served by Server once their
	// response is written.
	after afterResponse
	// tenants are the tenant models by name; tenantList in their order.
	tenants    map[string]*tenantModel
	tenantList []*tenantModel
	// tracer is nil when tracing is off.
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	// counting holds a token per prompt being counted against its
	// context window (Options.MaxConcurrentCounts).
	counting chan struct{}
	clock    Clock
	// streams are the streams being answered (CutStreams).
	streams openStreams
	// live are the live connections open (CutStreams).
	live liveConns
	// retryPolicy paces the attempts of an upstream call.
	retryPolicy retry.Policy
	// flights are the response cache's misses in flight (cache.go).
	flights flights
}

// PreAuthRule names the per-address limit checked before authentication.
const PreAuthRule = "pre_auth_per_ip"

type model struct {
	Model
	// deployments are where it is served from: at least one.
	deployments []*deployment
	fallbacks   []*model
	// outputMean is the mean output per completion of the model's
	// settled calls on this replica (a float64's bits; 0 until one),
	// the expected output a rule with reserve: estimate reserves.
	outputMean atomic.Uint64
}

// New validates opts and returns a Gateway.
func New(opts Options) (*Gateway, error) {
	opts, err := withDefaults(opts)
	if err != nil {
		return nil, err
	}
	g := &Gateway{opts: opts, limiter: opts.Limiter, models: map[string]*model{}, providers: map[string]*provider{}, log: opts.Logger,
		counting: make(chan struct{}, opts.MaxConcurrentCounts), clock: opts.Clock}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.clock == nil {
		g.clock = realClock{}
	}
	// The provider's hint is honoured up to RetryMax: a longer one goes to
	// the next candidate or the client, rather than being retried early
	// here and again by the client.
	g.retryPolicy = retry.Policy{MaxAttempts: opts.UpstreamRetries + 1, BaseDelay: opts.RetryBase, MaxDelay: opts.RetryMax,
		MaxHint: opts.RetryMax, HintSlack: -1, Clock: g.clock}
	if opts.TracerProvider != nil {
		g.tracer = opts.TracerProvider.Tracer(tracerName)
		g.propagator = opts.Propagator
		if g.propagator == nil {
			g.propagator = propagation.TraceContext{}
		}
	}
	if opts.PreAuthPerMinute > 0 {
		l, err := sluice.New(sluice.Options{Store: memstore.New(memstore.Options{}), Rules: []sluice.Rule{{
			Name: PreAuthRule, Kind: sluice.KindRate, Subject: "ip", Limit: opts.PreAuthPerMinute, Window: time.Minute}}})
		if err != nil {
			return nil, fmt.Errorf("gateway: pre-auth limit: %w", err)
		}
		g.preAuth = l
	}
	for _, p := range opts.Providers {
		pp, err := newProvider(p, opts.RequestTimeout)
		if err != nil {
			return nil, err
		}
		g.providers[p.Name] = pp
	}
	if err := g.addModels(opts.Models); err != nil {
		return nil, err
	}
	if err := g.addTenantModels(opts.TenantModels); err != nil {
		return nil, err
	}
	return g, nil
}

// withDefaults checks opts and fills in the defaults of what it leaves
// zero.
func withDefaults(opts Options) (Options, error) {
	if s := opts.Sessions; s != nil && (s.Store == nil || s.Terms == nil) {
		return opts, errors.New("gateway: Sessions needs a Store and Terms")
	}
	if opts.Limiter == nil || opts.Keys == nil {
		return opts, errors.New("gateway: Limiter and Keys are required")
	}
	if err := checkTerminalStatus(opts.TerminalStatus); err != nil {
		return opts, err
	}
	if opts.MaxConcurrentCounts <= 0 {
		opts.MaxConcurrentCounts = max(1, runtime.GOMAXPROCS(0)/2)
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 8 << 20
	}
	if opts.LiveMaxFrameBytes <= 0 {
		opts.LiveMaxFrameBytes = 1 << 20
	}
	if len(opts.LiveSecretKey) == 0 {
		opts.LiveSecretKey = make([]byte, 32)
		_, _ = rand.Read(opts.LiveSecretKey) // never fails (crypto/rand)
	}
	if opts.UpstreamRetries < 0 {
		opts.UpstreamRetries = 0
	} else if opts.UpstreamRetries == 0 {
		opts.UpstreamRetries = 2
	}
	for _, d := range []struct {
		value *time.Duration
		def   time.Duration
	}{
		{&opts.HeaderTimeout, 10 * time.Second},
		{&opts.CatalogTimeout, 250 * time.Millisecond},
		{&opts.SettleRetryBase, 100 * time.Millisecond},
		{&opts.RequestTimeout, 10 * time.Minute},
		{&opts.RetryBase, 100 * time.Millisecond},
		{&opts.RetryMax, 2 * time.Second},
		{&opts.BatchMaxWait, 30 * time.Second},
		{&opts.PaceMaxWait, 10 * time.Second},
		{&opts.LiveMaxDuration, 60 * time.Minute},
		{&opts.LiveWriteTimeout, 10 * time.Second},
	} {
		if *d.value <= 0 {
			*d.value = d.def
		}
	}
	return opts, nil
}

// addModels adds the models the gateway serves, by name and alias, and
// resolves their fallbacks.
func (g *Gateway) addModels(models []Model) error {
	for _, m := range models {
		if m.MaxOutputTokens <= 0 {
			return fmt.Errorf("gateway: model %q: max_output_tokens must be positive", m.Name)
		}
		if m.UpstreamName == "" {
			m.UpstreamName = m.Name
		}
		deps, err := g.deploymentsOf(&m)
		if err != nil {
			return err
		}
		mm := &model{Model: m, deployments: deps}
		for _, name := range append([]string{m.Name}, m.Aliases...) {
			if _, dup := g.models[name]; dup {
				return fmt.Errorf("gateway: model name %q is used twice", name)
			}
			g.models[name] = mm
		}
		g.modelList = append(g.modelList, mm)
	}
	for _, m := range g.modelList {
		for _, f := range m.Fallbacks {
			fm, ok := g.models[f]
			if !ok || fm == m {
				return fmt.Errorf("gateway: model %q: bad fallback %q", m.Name, f)
			}
			m.fallbacks = append(m.fallbacks, fm)
		}
	}
	return nil
}

// Handler is the fasthttp handler of the client API. Mounted in a server
// of the caller's, it settles each call on a goroutine of its own; the
// server of Server settles on the connection's goroutine instead, once the
// response is written.
func (g *Gateway) Handler(ctx *fasthttp.RequestCtx) { g.handle(ctx, false) }

// handleServed is the handler of Server, whose ConnState hook runs
// g.after.
func (g *Gateway) handleServed(ctx *fasthttp.RequestCtx) { g.handle(ctx, true) }

// lengthAndChunked reports a request that has a Transfer-Encoding and a
// Content-Length too. fasthttp reads the body by the Transfer-Encoding and
// drops the Content-Length, so the raw header lines are looked at.
func lengthAndChunked(h *fasthttp.RequestHeader) bool {
	if len(h.Peek("Transfer-Encoding")) == 0 {
		return false
	}
	for line := range bytes.SplitSeq(h.RawHeaders(), []byte("\r\n")) {
		name, _, ok := bytes.Cut(line, []byte(":"))
		if ok && bytes.EqualFold(bytes.TrimSpace(name), []byte("Content-Length")) {
			return true
		}
	}
	return false
}

func (g *Gateway) handle(ctx *fasthttp.RequestCtx, served bool) {
	path := string(ctx.Path())
	method := string(ctx.Method())
	g.noteTerminalStatus(ctx)
	noteRequestID(ctx)
	if lengthAndChunked(&ctx.Request.Header) {
		// Two framings: a proxy in front may read one and Sluice the
		// other (request smuggling). Refused, and the connection closed.
		g.refuseEarly(ctx, path, &apiError{status: 400, typ: "invalid_request_error", anthType: "invalid_request_error",
			code: "malformed_request", message: "The request has both Content-Length and Transfer-Encoding; send one."})
		ctx.SetConnectionClose()
		return
	}
	switch {
	case path == "/healthz" || path == "/readyz":
		g.health(ctx, path == "/readyz")
	case path == "/v1/models" && method == fasthttp.MethodGet:
		g.listModels(ctx)
	case path == "/v1/sessions" || strings.HasPrefix(path, "/v1/sessions/"):
		g.inFlight.add()
		defer g.inFlight.done()
		g.sessions(ctx, path, method)
	case path == realtimeRoute.path && method == fasthttp.MethodGet:
		g.realtime(ctx) // a live connection: realtime.go
	case path == "/v1/realtime/client_secrets" && method == fasthttp.MethodPost:
		g.inFlight.add()
		defer g.inFlight.done()
		g.clientSecrets(ctx) // realtime_secrets.go
	case method != fasthttp.MethodPost:
		if _, ok := routes[path]; !ok {
			g.refuseEarly(ctx, path, errNotFound(path))
			return
		}
		ctx.Response.Header.Set("Allow", fasthttp.MethodPost)
		g.refuseEarly(ctx, path, errMethodNotAllowed(method, path))
	default:
		rt, ok := routes[path]
		if !ok {
			g.refuseEarly(ctx, path, errNotFound(path))
			return
		}
		g.serve(ctx, rt, served)
	}
}

func routeForShape(path string) *route {
	if strings.HasPrefix(path, "/v1/messages") {
		return routes["/v1/messages"]
	}
	return routes["/v1/chat/completions"]
}

func (g *Gateway) health(ctx *fasthttp.RequestCtx, ready bool) {
	ctx.SetContentType("application/json")
	if ready && g.draining.Load() {
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		ctx.SetBodyString(`{"status":"draining"}`)
		return
	}
	if down := g.ready.down(); ready && len(down) > 0 {
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		ctx.SetBodyString(unreadyBody(down))
		return
	}
	ctx.SetBodyString(`{"status":"ok"}`)
}

// Drain marks the gateway as shutting down (readyz answers 503) and waits
// until every in-flight request has finished and been settled, or ctx ends.
// Requests may still arrive while it waits.
func (g *Gateway) Drain(ctx context.Context) error {
	g.draining.Store(true)
	select {
	case <-g.inFlight.idle():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// inFlight counts the requests and streams in flight. It is not a
// sync.WaitGroup because requests keep arriving while Drain waits, and a
// WaitGroup's Add racing with the end of its Wait panics.
type inFlight struct {
	n  atomic.Int64
	mu sync.Mutex
	// zero is closed when n reaches 0; nil until someone waits.
	zero chan struct{}
}

func (f *inFlight) add() { f.n.Add(1) }

func (f *inFlight) done() {
	if f.n.Add(-1) != 0 {
		return
	}
	f.mu.Lock()
	if f.zero != nil && f.n.Load() == 0 {
		close(f.zero)
		f.zero = nil
	}
	f.mu.Unlock()
}

// idle returns a channel closed once nothing is in flight.
func (f *inFlight) idle() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n.Load() == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	if f.zero == nil {
		f.zero = make(chan struct{})
	}
	return f.zero
}
