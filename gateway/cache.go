package gateway

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/llm"
	"github.com/valyala/fasthttp"
)

// The response cache is a step of the call pipeline, between picking the
// model and trying the candidates (run calls serveCached): an identical
// request of the same org to the same model is answered with the answer
// kept from an earlier call, admitted like any call but charged per each
// rule's cache_hits, and with no provider called. See docs/gateway.md,
// "Response cache".

// HeaderCache says how the response cache took part in an answer: hit,
// miss or bypass (the client's Cache-Control said not to read it).
const HeaderCache = "X-Sluice-Cache"

// Values of HeaderCache and Event.Cache.
const (
	cacheHit    = "hit"
	cacheMiss   = "miss"
	cacheBypass = "bypass"
)

// DefaultCacheMaxEntryBytes caps one cached answer when
// Options.CacheMaxEntryBytes is 0.
const DefaultCacheMaxEntryBytes = 1 << 20

// cacheStoreTimeout bounds each read and write of the cache's store: a
// store slower than that is a miss, never a failed call.
const cacheStoreTimeout = 250 * time.Millisecond

// CacheStore keeps the response cache's entries: opaque values by key,
// each for its time to live. Get returns ok false for a key it does not
// hold (or no longer holds); an error is a store that did not answer, which
// the gateway logs and takes as a miss. Implementations must be safe for
// concurrent use; see package gateway/respcache.
type CacheStore interface {
	Get(ctx context.Context, key string) (value []byte, ok bool, err error)
	Set(ctx context.Context, key string, value []byte, ttl time.Duration) error
}

// cachedAnswer is one entry: the provider's answer to a call, whole or as
// the events it streamed (with the usage asked for upstream), and the usage
// it reported.
type cachedAnswer struct {
	// Expires is when the entry ends on the gateway's clock (Unix
	// nanoseconds): a store that keeps it longer is not believed.
	Expires     int64     `json:"expires"`
	ContentType string    `json:"content_type"`
	Stream      bool      `json:"stream,omitempty"`
	Usage       llm.Usage `json:"usage"`
	Body        []byte    `json:"body"`
}

// callCache is a call's use of the response cache.
type callCache struct {
	key         string // empty: the call does not use the cache
	read, write bool
	// hit is the answer the call was served, if it was.
	hit *cachedAnswer
	// flight is the flight the call leads: identical calls wait for its
	// answer rather than calling the provider too. unlock gives back the
	// lock it holds for every replica (cachelock.go), if any.
	flight chan struct{}
	unlock func()
	// recording is set while a streamed answer is kept in fill.
	recording bool
	fill      []byte
}

// cacheRoutes are the routes whose answers may be cached.
var cacheRoutes = map[string]bool{"chat": true, "responses": true, "messages": true, "embeddings": true}

// serveCached answers the call from the response cache when it may, or
// tries its candidates (tryCandidates) and keeps what the model asked for
// answered. nil: the client was answered.
func (c *call) serveCached(tenant bool) error {
	if !c.cacheable() {
		return c.tryCandidates(tenant)
	}
	cc := &c.cache
	cc.read, cc.write = cacheControl(&c.ctx.Request.Header)
	if c.who.NoCache {
		cc.read, cc.write = false, false // the key's setting
	}
	cc.key = c.cacheKey()
	state := cacheBypass
	if cc.read {
		state = cacheMiss
		if done, err := c.fromCache(tenant); done {
			return err
		}
	}
	c.event.Cache = state
	c.ctx.Response.Header.Set(HeaderCache, state)
	cc.recording = cc.write && c.bound.Stream
	err := c.tryCandidates(tenant)
	if !c.streaming() {
		c.keepWhole(err)
	} else if err != nil {
		c.finishFlight()
	}
	// A stream is kept, and its flight finished, when it ends
	// (keepStream).
	return err
}

// cacheable reports whether the call may use the response cache: its model
// keeps answers, on a route whose answers are cached. A call made with the
// client's own provider key or in a session does not (the one is not the
// org's provider account, the other counts turns and tokens a hit does not
// use).
func (c *call) cacheable() bool {
	return c.g.opts.Cache != nil && c.model.CacheTTL > 0 && cacheRoutes[c.rt.name] && c.ownKey == "" && c.session.id == ""
}

// cacheControl reads the client's Cache-Control: no-cache does not read the
// cache, no-store does not write it.
func cacheControl(h *fasthttp.RequestHeader) (read, write bool) {
	read, write = true, true
	for _, v := range h.PeekAll(fasthttp.HeaderCacheControl) {
		for d := range bytes.SplitSeq(v, []byte(",")) {
			switch string(bytes.ToLower(bytes.TrimSpace(d))) {
			case "no-cache":
				read = false
			case "no-store":
				write = false
			}
		}
	}
	return read, write
}

// fromCache serves the call a kept answer: one there now, or the one an
// identical call in flight is about to keep. done is false when the call
// is a miss, a hit its rules refused, or a call its key may not make: it
// then goes to the candidates, which refuse it as they would any call (or
// let a fallback serve it).
func (c *call) fromCache(tenant bool) (done bool, err error) {
	if c.permitted(c.model, true, tenant) != nil {
		return false, nil
	}
	e := c.lookup()
	for e == nil {
		flight, leading := c.g.flights.join(c.cache.key, c.cache.write)
		if flight == nil {
			return false, nil
		}
		if leading {
			c.cache.flight = flight
			// The answer may have been kept between the lookup and
			// the join, or be on its way from another replica.
			if e = c.lookup(); e == nil {
				e = c.awaitReplica()
			}
			if e != nil {
				c.finishFlight()
				break
			}
			return false, nil
		}
		if !c.awaitFlight(flight) {
			return false, nil
		}
		if e = c.lookup(); e == nil {
			return false, nil // the leader kept nothing: a miss of its own
		}
	}
	adm, err := c.admitHit(c.model, e)
	if err != nil {
		return false, nil
	}
	c.cache.hit = e
	c.answerHit(adm, e)
	return true, nil
}

// cacheKey is the call's entry: its org, the model that serves it, its
// route, the API version and beta headers it sent (they pass to the
// provider and may change its answer), and its body in canonical form (see
// canonicalRequest). It is written org/model/digest, the org and the model
// in hex, so that an org's or a model's entries can be purged
// (cachePattern).
func (c *call) cacheKey() string {
	org := cmp.Or(c.who.Org, sluice.DefaultOrg)
	h := sha256.New()
	for _, part := range [][]byte{[]byte(org), []byte(c.model.Name), []byte(c.rt.name),
		c.ctx.Request.Header.Peek("Anthropic-Version"), c.ctx.Request.Header.Peek("Anthropic-Beta"), c.ctx.Request.Header.Peek("OpenAI-Beta"),
		canonicalRequest(c.body)} {
		h.Write(part)
		h.Write([]byte{0})
	}
	return hex.EncodeToString([]byte(org)) + "/" + hex.EncodeToString([]byte(c.model.Name)) + "/" + hex.EncodeToString(h.Sum(nil))
}

// cacheIgnored are the request fields that do not change the answer: who
// the end user is, the client's own labels, whether usage is streamed (the
// gateway asks for it upstream in every case), and the model's name (the
// key names the model that serves).
var cacheIgnored = []string{"user", "safety_identifier", "metadata", "stream_options", "model"}

// canonicalRequest is body with its object keys sorted, its insignificant
// white space gone and cacheIgnored left out, so that two requests that
// differ in none of what the provider reads share an entry. The provider's
// own cache-control fields stay in. A body that does not parse (parse
// accepted it, so it does not happen) is kept as it is.
func canonicalRequest(body []byte) []byte {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return body
	}
	for _, f := range cacheIgnored {
		delete(m, f)
	}
	out, err := json.Marshal(m)
	if err != nil {
		return body
	}
	return out
}

// lookup returns the call's kept answer, if the store has one that has not
// expired.
func (c *call) lookup() *cachedAnswer {
	ctx, cancel := context.WithTimeout(context.Background(), cacheStoreTimeout)
	defer cancel()
	v, ok, err := c.g.opts.Cache.Get(ctx, c.cache.key)
	if err != nil {
		c.g.log.Warn("response cache read failed; served as a miss", "request_id", c.event.RequestID, "err", err)
		return nil
	}
	if !ok {
		return nil
	}
	var e cachedAnswer
	if err := json.Unmarshal(v, &e); err != nil {
		c.g.log.Warn("response cache entry does not decode; served as a miss", "request_id", c.event.RequestID, "err", err)
		return nil
	}
	if c.g.now().UnixNano() >= e.Expires {
		return nil
	}
	return &e
}

// admitHit admits a hit of e on cand: request rules count it, concurrency
// rules hold no place, and every other rule charges it per its cache_hits
// (sluice.Request.CacheHit).
func (c *call) admitHit(cand *model, e *cachedAnswer) (*admission, error) {
	c.tried = cand
	req := sluice.Request{Identity: c.identity(cand), Max: c.settleUsage(cand, e.Usage), CacheHit: true, Timeout: c.g.opts.RequestTimeout}
	endAdmit := c.trace.admitSpan(cand.Name)
	t0 := c.g.now()
	res, err := c.g.limiter.Admit(context.Background(), req)
	c.event.Decision += c.g.since(t0)
	endAdmit(err)
	if err != nil {
		return nil, err
	}
	c.held = admission{model: cand, res: res}
	return &c.held, nil
}

// answerHit answers the client with e, and ends the call charged what its
// admission reserved (settle).
func (c *call) answerHit(adm *admission, e *cachedAnswer) {
	cand := adm.model
	h := &c.ctx.Response.Header
	body := e.Body
	if e.Stream {
		body = c.replay(e.Body)
		h.Set("Cache-Control", "no-cache")
	}
	h.SetContentType(e.ContentType)
	c.setResultHeaders(h, adm)
	h.Set(HeaderCache, cacheHit)
	c.ctx.SetStatusCode(200)
	c.ctx.SetBody(body)
	// No provider worked for it: Event.Provider stays empty.
	c.event.Model, c.event.Outcome = cand.Name, outcomeAdmitted
	c.event.Classes = adm.res.Result().Classes
	c.event.Cache, c.event.CacheSaved = cacheHit, c.settleUsage(cand, e.Usage).Cost
	c.adm, c.ending, c.usage, c.reported = adm, endCharge, e.Usage, false
}

// replay is a kept stream's events as the client gets them: through the
// route's stream reader, as a live stream is, so that usage the client did
// not ask for is left out.
func (c *call) replay(raw []byte) []byte {
	reader := c.rt.stream(c.rt.name == "chat" && !c.bound.IncludeUsage)
	events := llm.NewEventReader(bufio.NewReader(bytes.NewReader(raw)))
	out := make([]byte, 0, len(raw))
	for {
		ev, err := events.Next()
		if err != nil && err != io.ErrUnexpectedEOF {
			return out
		}
		if ev.Data == nil {
			out = append(out, ev.Raw...)
		} else if forward, _ := reader.Feed(ev.Name, ev.Data); sameSlice(forward, ev.Data) {
			out = append(out, ev.Raw...)
		} else if forward != nil {
			out = llm.AppendEvent(out, ev.Name, forward)
		}
		if err != nil {
			return out
		}
	}
}

// keepWhole keeps the answer of a call that did not stream, when the model
// the call asked for gave it whole, with usage it could have produced, at
// the output cap the request asked for (not one a rule clamped), and
// finishes the call's flight.
func (c *call) keepWhole(err error) {
	defer c.finishFlight()
	if err != nil || !c.cache.write || c.ending != endCharge || !c.reported || c.adm.model != c.model || c.adm.clamped ||
		c.ctx.Response.StatusCode() != 200 || c.impossible(c.adm, c.usage) {
		return
	}
	c.keep(&cachedAnswer{ContentType: string(c.ctx.Response.Header.ContentType()), Usage: c.usage, Body: c.ctx.Response.Body()})
}

// teeStream records an event of a streamed answer as the provider sent it,
// up to the size cap.
func (c *call) teeStream(raw []byte) {
	cc := &c.cache
	if !cc.recording {
		return
	}
	if len(cc.fill)+len(raw) > c.maxCacheEntry() {
		cc.recording, cc.fill = false, nil
		return
	}
	cc.fill = append(cc.fill, raw...)
}

// keepStream keeps a streamed answer once it has ended: when it ended
// cleanly, from the model the call asked for, unclamped, with usage
// reported and possible; and finishes the call's flight. A cut stream is
// never kept.
func (c *call) keepStream(clean bool, adm *admission, u llm.Usage, reported bool) {
	defer c.finishFlight()
	cc := &c.cache
	if !cc.recording || !clean || !reported || adm.model != c.model || adm.clamped || c.impossible(adm, u) {
		return
	}
	c.keep(&cachedAnswer{ContentType: string(c.ctx.Response.Header.ContentType()), Stream: true, Usage: u, Body: cc.fill})
	cc.fill = nil
}

// keep writes e under the call's key, for the model's time to live, unless
// it is over the size cap.
func (c *call) keep(e *cachedAnswer) {
	if len(e.Body) > c.maxCacheEntry() {
		return
	}
	ttl := c.model.CacheTTL
	e.Expires = c.g.now().Add(ttl).UnixNano()
	v, err := json.Marshal(e)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), cacheStoreTimeout)
		err = c.g.opts.Cache.Set(ctx, c.cache.key, v, ttl)
		cancel()
	}
	if err != nil {
		c.g.log.Warn("response cache write failed", "request_id", c.event.RequestID, "err", err)
	}
}

func (c *call) maxCacheEntry() int {
	return cmp.Or(c.g.opts.CacheMaxEntryBytes, DefaultCacheMaxEntryBytes)
}

// finishFlight lets the calls waiting for the call's flight, here or on
// other replicas, look for its answer.
func (c *call) finishFlight() {
	if c.cache.unlock != nil {
		c.cache.unlock()
		c.cache.unlock = nil
	}
	if f := c.cache.flight; f != nil {
		c.cache.flight = nil
		c.g.flights.finish(c.cache.key, f)
	}
}

// awaitFlight waits for flight to finish, until the call's deadline or its
// client leaving; it reports whether the flight finished.
func (c *call) awaitFlight(flight chan struct{}) bool {
	quit := make(chan struct{})
	stop := sync.OnceFunc(func() { close(quit) })
	stopTimer := c.g.clock.AfterFunc(c.deadline.Sub(c.g.now()), stop)
	defer stopTimer()
	if conn := c.ctx.Conn(); conn != nil {
		w := watchClient(conn, 0, func() { c.gone.Store(true); stop() })
		defer w.stop()
	}
	select {
	case <-flight:
		return true
	case <-quit:
		return false
	}
}

// flights are the misses being answered, by cache key: an identical miss
// waits for the one in flight instead of calling the provider too.
type flights struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

// join returns the flight of key: the one in flight (leading false), or,
// when there is none and lead is set, a new one the caller leads and must
// finish. nil: none, and the caller does not lead.
func (f *flights) join(key string, lead bool) (flight chan struct{}, leading bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ch, ok := f.m[key]; ok {
		return ch, false
	}
	if !lead {
		return nil, false
	}
	if f.m == nil {
		f.m = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	f.m[key] = ch
	return ch, true
}

func (f *flights) finish(key string, ch chan struct{}) {
	f.mu.Lock()
	if f.m[key] == ch {
		delete(f.m, key)
	}
	f.mu.Unlock()
	close(ch)
}
