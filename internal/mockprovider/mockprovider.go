// Package mockprovider is a deterministic LLM provider for tests and load benchmarks. It speaks
// OpenAI Chat Completions, Responses and Embeddings and Anthropic Messages, streaming included,
// in the providers' own wire formats, and answers with exactly predictable usage.
//
// # Usage
//
// Input tokens are the prompt bytes divided by 4, rounded up, at least 1 (plus one per token id
// for embeddings given token arrays). Prompt bytes are the bytes, UTF-8 after JSON unescaping,
// of the prompt text that the llm/openai and llm/anthropic parsers yield (their Parse*Text
// functions): message contents that are strings and the text of text parts (chat: parts of type
// text; Responses: instructions, a string input, item contents and function call outputs that
// are strings, parts of type input_text, output_text or text; Anthropic: system, text blocks,
// tool_result contents; embeddings: every input string). Roles, tool definitions, images and
// JSON syntax do not count.
//
// Output is, per completion, exactly the request's output cap (max_completion_tokens or
// max_tokens, max_output_tokens, max_tokens) or Options.DefaultMaxTokens when it has none; n
// completions multiply it. Each token is one short word.
//
// # Directives
//
// Prompt text may carry directives, each in brackets, several per bracket allowed:
//
//	[mock tokens=N]    produce N tokens per completion (never more than the cap)
//	[mock delay=MS]    wait MS milliseconds before the first byte (on top of Options.Latency)
//	[mock status=CODE] answer HTTP CODE with the provider's error shape (429 adds retry-after: 1)
//	[mock quota]       answer the provider's quota-exhausted error
//	[mock cut=K]       in a stream, send K content chunks, then drop the connection with no usage
package mockprovider

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/anthropic"
	"github.com/sluicehq/sluice/llm/openai"
)

// Models are the model names the mock serves; any other answers 404.
var Models = []string{"mock-small", "mock-large"}

// MaxBodyBytes is the largest request body accepted; larger answers 413.
const MaxBodyBytes = 32 << 20

// Route names one API of the mock.
type Route int

// The routes.
const (
	RouteChat Route = iota
	RouteResponses
	RouteEmbeddings
	RouteMessages
	RouteModels
	// RouteCountTokens is Anthropic's POST /v1/messages/count_tokens.
	RouteCountTokens
	numRoutes
)

// anthropic reports a route of Anthropic's API, answered in its shapes.
func (r Route) anthropic() bool { return r == RouteMessages || r == RouteCountTokens }

var routeNames = [numRoutes]string{"chat", "responses", "embeddings", "messages", "models", "count_tokens"}

// String returns the route's short name.
func (r Route) String() string {
	if r < 0 || r >= numRoutes {
		return "unknown"
	}
	return routeNames[r]
}

// Outcome is how a stream ended.
type Outcome int

// The outcomes of a stream.
const (
	// Completed streams sent every event.
	Completed Outcome = iota
	// Cancelled streams lost their client (the request context ended) before completion.
	Cancelled
	// Cut streams were dropped on purpose by a [mock cut=K] directive.
	Cut
)

// Options configure a Server. The zero value is a fast mock with no latency.
type Options struct {
	// Latency is waited before the first byte of every answer.
	Latency time.Duration
	// TokensPerChunk is the number of tokens in each streamed content chunk; 0 means 1.
	TokensPerChunk int
	// ChunkInterval is waited between streamed content chunks; 0 streams as fast as possible.
	ChunkInterval time.Duration
	// DefaultMaxTokens is the output of a request without an output cap; 0 means 256.
	DefaultMaxTokens int64
	// OnStreamEnd, when set, is called at the end of every streamed answer, from the handler's
	// goroutine, after Stats counts it.
	OnStreamEnd func(route Route, outcome Outcome)
	// RateLimitRequests, when positive, is the mock's own rate limit, as the real providers
	// have one: a bucket of this many model calls refilled continuously over RateLimitWindow
	// (0 means a minute), told in every answer's rate-limit headers (OpenAI's
	// x-ratelimit-*-requests, Anthropic's anthropic-ratelimit-requests-*, whose reset is when
	// the bucket is full again); a call that finds it empty is answered 429 with retry-after.
	RateLimitRequests int64
	RateLimitWindow   time.Duration
}

// Stats counts what a Server has seen.
type Stats struct {
	// Requests counts requests per route, indexed by Route.
	Requests [numRoutes]int64
	// StreamsCompleted, StreamsCancelled and StreamsCut count streamed answers by Outcome.
	StreamsCompleted, StreamsCancelled, StreamsCut int64
	// CallsCancelled counts answers not streamed that were never sent: the client left while
	// the answer was delayed.
	CallsCancelled int64
	// RateLimited counts calls refused by Options.RateLimitRequests.
	RateLimited int64
}

// Server is the mock provider, an http.Handler. It is safe for concurrent use.
type Server struct {
	opts      Options
	requests  [numRoutes]atomic.Int64
	completed atomic.Int64
	cancelled atomic.Int64
	cut       atomic.Int64
	abandoned atomic.Int64
	seq       atomic.Int64

	limitMu    sync.Mutex
	bucketAt   time.Time
	bucketUsed float64 // calls not yet refilled, at bucketAt
	limited    atomic.Int64

	// live counts the realtime API's sessions (realtime.go).
	live realtimeCounters
}

// New returns a Server with the given options.
func New(o Options) *Server {
	if o.TokensPerChunk <= 0 {
		o.TokensPerChunk = 1
	}
	if o.DefaultMaxTokens <= 0 {
		o.DefaultMaxTokens = 256
	}
	return &Server{opts: o}
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	var st Stats
	for i := range s.requests {
		st.Requests[i] = s.requests[i].Load()
	}
	st.StreamsCompleted = s.completed.Load()
	st.StreamsCancelled = s.cancelled.Load()
	st.StreamsCut = s.cut.Load()
	st.CallsCancelled = s.abandoned.Load()
	st.RateLimited = s.limited.Load()
	return st
}

// ServeHTTP answers one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	route := RouteModels
	switch r.URL.Path {
	case "/v1/chat/completions":
		route = RouteChat
	case "/v1/responses":
		route = RouteResponses
	case "/v1/embeddings":
		route = RouteEmbeddings
	case "/v1/messages":
		route = RouteMessages
	case "/v1/messages/count_tokens":
		route = RouteCountTokens
	case "/v1/realtime":
		s.realtime(w, r) // a WebSocket: realtime.go
		return
	case "/v1/models":
		if r.Method != http.MethodGet {
			writeError(w, RouteModels, http.StatusMethodNotAllowed, "Method not allowed.", "", "")
			return
		}
		s.requests[RouteModels].Add(1)
		if !s.wait(r.Context(), s.opts.Latency) {
			return
		}
		s.models(w, r.Header.Get("anthropic-version") != "")
		return
	default:
		writeError(w, RouteChat, http.StatusNotFound, "Unknown request URL: "+r.Method+" "+r.URL.Path+".", "", "unknown_url")
		return
	}
	if r.Method != http.MethodPost {
		writeError(w, route, http.StatusMethodNotAllowed, "Method not allowed.", "", "")
		return
	}
	s.requests[route].Add(1)
	if !s.rateLimit(w, route) {
		return
	}
	c, status, msg, param, code := s.parse(w, r, route)
	if status != 0 {
		if s.wait(r.Context(), s.opts.Latency) {
			writeError(w, route, status, msg, param, code)
		}
		return
	}
	if !s.wait(r.Context(), s.opts.Latency+c.delay) {
		if c.stream {
			s.end(route, Cancelled)
		} else {
			s.abandoned.Add(1)
		}
		return
	}
	switch {
	case c.quota:
		writeQuota(w, route)
	case route == RouteCountTokens && c.status == 0:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(appendInt([]byte(`{"input_tokens":`), c.input))
		_, _ = io.WriteString(w, "}")
	case c.status != 0:
		writeError(w, route, c.status, "Mock error requested with status "+strconv.Itoa(c.status)+".", "", "")
	case c.stream:
		s.end(route, s.stream(w, r.Context(), &c))
	default:
		s.respond(w, &c)
	}
}

// rateLimit counts one model call against Options.RateLimitRequests and writes the rate-limit
// headers; over the limit it answers 429 and reports false.
func (s *Server) rateLimit(w http.ResponseWriter, route Route) bool {
	limit := s.opts.RateLimitRequests
	if limit <= 0 {
		return true
	}
	window := s.opts.RateLimitWindow
	if window <= 0 {
		window = time.Minute
	}
	now := time.Now()
	perCall := float64(window) / float64(limit) // refill time of one call
	s.limitMu.Lock()
	if !s.bucketAt.IsZero() {
		s.bucketUsed = max(0, s.bucketUsed-float64(now.Sub(s.bucketAt))/perCall)
	}
	s.bucketAt = now
	ok := s.bucketUsed+1 <= float64(limit)
	if ok {
		s.bucketUsed++
	}
	used := s.bucketUsed
	s.limitMu.Unlock()
	remaining := limit - int64(math.Ceil(used))
	reset := now.Add(time.Duration(used * perCall)) // when the bucket is full again
	h := w.Header()
	if route.anthropic() {
		h.Set("anthropic-ratelimit-requests-limit", strconv.FormatInt(limit, 10))
		h.Set("anthropic-ratelimit-requests-remaining", strconv.FormatInt(remaining, 10))
		h.Set("anthropic-ratelimit-requests-reset", reset.UTC().Format(time.RFC3339Nano))
	} else {
		h.Set("x-ratelimit-limit-requests", strconv.FormatInt(limit, 10))
		h.Set("x-ratelimit-remaining-requests", strconv.FormatInt(remaining, 10))
		h.Set("x-ratelimit-reset-requests", reset.Sub(now).Round(time.Millisecond).String())
	}
	if ok {
		return true
	}
	s.limited.Add(1)
	wait := time.Duration((used + 1 - float64(limit)) * perCall) // until one call is refilled
	h.Set("Retry-After", strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10))
	h.Set("retry-after-ms", strconv.FormatInt(wait.Milliseconds()+1, 10))
	writeError(w, route, http.StatusTooManyRequests, "Rate limit reached for requests.", "", "")
	return false
}

// call is one parsed request.
type call struct {
	route        Route
	id           string
	model        string
	created      int64
	stream       bool
	includeUsage bool
	n            int64
	cap          int64
	capSent      bool
	perChoice    int64
	input        int64
	delay        time.Duration
	status       int
	quota        bool
	cut          int64
	body         []byte
}

func (c *call) output() int64 { return c.perChoice * c.n }

// hitCap reports whether the output stopped at the request's cap: a request without one stops
// of its own accord after Options.DefaultMaxTokens.
func (c *call) hitCap() bool { return c.capSent && c.perChoice >= c.cap }

// parse reads and checks the request; a non-zero status is an error to answer.
func (s *Server) parse(w http.ResponseWriter, r *http.Request, route Route) (c call, status int, msg, param, code string) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return c, http.StatusRequestEntityTooLarge, "Request body too large.", "", ""
		}
		return c, http.StatusBadRequest, "Could not read the request body.", "", ""
	}
	d := directives{tokens: -1, cut: -1}
	var textBytes int64
	visit := func(text []byte) {
		textBytes += int64(len(text))
		d.scan(text)
	}
	var b llm.Bound
	switch route {
	case RouteChat:
		b, err = openai.ParseChatText(body, visit)
	case RouteResponses:
		b, err = openai.ParseResponsesText(body, visit)
	case RouteEmbeddings:
		b, err = openai.ParseEmbeddingsText(body, visit)
	default:
		b, err = anthropic.ParseMessagesText(body, visit)
	}
	if err != nil {
		var re *llm.RequestError
		if errors.As(err, &re) {
			return c, http.StatusBadRequest, re.Message, re.Param, ""
		}
		return c, http.StatusBadRequest, err.Error(), "", ""
	}
	if !knownModel(b.Model) {
		if route.anthropic() {
			return c, http.StatusNotFound, "model: " + b.Model, "", ""
		}
		return c, http.StatusNotFound, "The model `" + b.Model + "` does not exist or you do not have access to it.", "", "model_not_found"
	}
	c = call{
		route: route, model: b.Model, stream: b.Stream && route != RouteEmbeddings && route != RouteCountTokens,
		includeUsage: b.IncludeUsage, n: b.N, cap: s.opts.DefaultMaxTokens,
		delay: d.delay, status: d.status, quota: d.quota, cut: d.cut, body: body,
		created: time.Now().Unix(),
	}
	if b.HasMaxOutput {
		c.cap, c.capSent = b.MaxOutputTokens, true
	}
	c.perChoice = c.cap
	if d.tokens >= 0 {
		c.perChoice = min(d.tokens, c.cap)
	}
	c.input = (textBytes+3)/4 + b.TokenIDs
	if c.input < 1 {
		c.input = 1
	}
	c.id = strconv.FormatInt(s.seq.Add(1), 10)
	return c, 0, "", "", ""
}

func knownModel(m string) bool {
	for _, k := range Models {
		if m == k {
			return true
		}
	}
	return false
}

// wait sleeps for d unless ctx ends first; it reports whether the caller should go on.
func (s *Server) wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s *Server) end(route Route, o Outcome) {
	switch o {
	case Completed:
		s.completed.Add(1)
	case Cancelled:
		s.cancelled.Add(1)
	case Cut:
		s.cut.Add(1)
	}
	if s.opts.OnStreamEnd != nil {
		s.opts.OnStreamEnd(route, o)
	}
}

// directives are what [mock ...] brackets in the prompt asked for.
type directives struct {
	tokens int64 // -1 when absent
	delay  time.Duration
	status int
	quota  bool
	cut    int64 // -1 when absent
}

// scan reads every [mock ...] bracket in text; later values win.
func (d *directives) scan(text []byte) {
	for {
		i := bytes.Index(text, []byte("[mock"))
		if i < 0 {
			return
		}
		text = text[i+len("[mock"):]
		end := bytes.IndexByte(text, ']')
		if end < 0 {
			return
		}
		for _, f := range bytes.Fields(text[:end]) {
			key, val, _ := bytes.Cut(f, []byte("="))
			n, err := strconv.ParseInt(string(val), 10, 64)
			ok := err == nil && n >= 0
			switch string(key) {
			case "tokens":
				if ok {
					d.tokens = n
				}
			case "delay":
				if ok {
					d.delay = time.Duration(n) * time.Millisecond
				}
			case "status":
				if ok && n >= 100 && n <= 599 {
					d.status = int(n)
				}
			case "quota":
				d.quota = true
			case "cut":
				if ok {
					d.cut = n
				}
			}
		}
		text = text[end+1:]
	}
}
