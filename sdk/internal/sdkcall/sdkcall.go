// Package sdkcall is what the SDK wrappers (sdk/openaisdk, sdk/anthropicsdk) share: admit a
// request the SDK is about to send through a Limiter, send it, and settle from the response or
// the stream the SDK reads. Each wrapper supplies its wire format as an API.
package sdkcall

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/sluicehttp"
)

// Options are the wrappers' options (see openaisdk.Options).
type Options struct {
	Identity        func(*http.Request) sluice.Identity
	Price           func(model string) sluice.Price
	MaxOutputTokens func(model string) int64
	OnSettleError   func(*http.Request, error)
}

// Follower follows one SSE stream (see llm/openai.ChatStream).
type Follower interface {
	Feed(event, data []byte) (forward []byte, usage llm.Usage)
	Usage() llm.Usage
	Reported() bool
}

// API is one route of a wire format.
type API struct {
	// Name is the route's name in rules (chat, responses, embeddings, messages).
	Name  string
	Parse func(body []byte) (llm.Bound, error)
	// Edit returns the body to send: the output cap set to outputCap when it is above 0, and
	// for a stream whatever makes the provider report usage; injected says whether the client
	// gets usage it did not ask for, which Stream(injected) then hides. Nil sends the body
	// unchanged.
	Edit func(body []byte, b llm.Bound, outputCap int64) (out []byte, injected bool)
	// Usage reads the usage of a response body.
	Usage func(body []byte) (llm.Usage, bool)
	// Stream returns the follower of a streamed answer; nil for routes that do not stream.
	Stream func(injected bool) Follower
	// RefusalBody is a refusal's body in the API's error shape.
	RefusalBody func(r *sluicehttp.Refusal) []byte
	// BadRequestBody is the body of a 400 for a request that could not be bounded.
	BadRequestBody func(param, message string) []byte
}

// Next sends a request on (the SDK's middleware chain).
type Next = func(*http.Request) (*http.Response, error)

// Middleware returns the SDK middleware: requests for which api returns an API are admitted
// through l and settled; the others pass through untouched.
func Middleware(l *sluice.Limiter, opts Options, api func(*http.Request) *API) func(*http.Request, Next) (*http.Response, error) {
	return func(req *http.Request, next Next) (*http.Response, error) {
		a := api(req)
		if a == nil || req.Body == nil || req.Body == http.NoBody {
			return next(req)
		}
		c := &call{l: l, opts: &opts, api: a, req: req}
		return c.run(next)
	}
}

// call is one request on its way through the wrapper.
type call struct {
	l        *sluice.Limiter
	opts     *Options
	api      *API
	req      *http.Request
	bound    llm.Bound
	injected bool
	price    sluice.Price
	res      *sluice.Reservation
	settle   context.Context
}

func (c *call) run(next Next) (*http.Response, error) {
	body, err := io.ReadAll(c.req.Body)
	_ = c.req.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("sluice: read request body: %w", err)
	}
	c.bound, err = c.api.Parse(body)
	if err != nil {
		var re *llm.RequestError
		if !errors.As(err, &re) {
			re = &llm.RequestError{Message: err.Error()}
		}
		return c.answer(http.StatusBadRequest, nil, c.api.BadRequestBody(re.Param, re.Message)), nil
	}
	outputCap, setCap := c.outputCap()
	if c.api.Edit != nil {
		edit := int64(0)
		if setCap {
			edit = outputCap
		}
		body, c.injected = c.api.Edit(body, c.bound, edit)
	}
	c.setBody(body)

	c.res, err = c.l.Admit(c.req.Context(), c.request(outputCap))
	if err != nil {
		ref, ok := sluicehttp.RefusalOf(err)
		if !ok {
			return nil, fmt.Errorf("sluice: admit: %w", err)
		}
		h := http.Header{}
		ref.SetHeaders(h, time.Now())
		return c.answer(ref.Status, h, c.api.RefusalBody(&ref)), nil
	}
	c.settle = context.WithoutCancel(c.req.Context())
	resp, err := next(c.req)
	if err != nil {
		c.release()
		return resp, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// The provider refused: the model did no work.
		c.release()
		return resp, nil
	}
	if c.bound.Stream && c.api.Stream != nil && isEventStream(resp.Header) {
		resp.Body = c.newStreamBody(resp.Body)
		return resp, nil
	}
	out, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		// Cut mid-answer: the model worked, its usage is unknown.
		c.finish(llm.Usage{}, false)
		resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(out), errReader{err}))
		return resp, nil
	}
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.ContentLength = int64(len(out))
	u, ok := c.api.Usage(out)
	c.finish(u, ok)
	return resp, nil
}

// outputCap is the output bound per completion: the request's own cap, or the one to set when
// it has none (Options.MaxOutputTokens, at least the smallest cap the provider accepts); 0
// without either, when only the input is reserved.
func (c *call) outputCap() (int64, bool) {
	b := &c.bound
	switch {
	case b.NoOutput:
		return 0, false
	case b.HasMaxOutput:
		return b.MaxOutputTokens, false
	case c.opts.MaxOutputTokens != nil:
		if n := c.opts.MaxOutputTokens(b.Model); n > 0 {
			return min(max(n, b.MinOutputTokens), llm.MaxOutputTokensLimit), true
		}
	}
	return 0, false
}

// setBody makes body the request's body, replayable.
func (c *call) setBody(body []byte) {
	c.req.Body = io.NopCloser(bytes.NewReader(body))
	c.req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	c.req.ContentLength = int64(len(body))
	if c.req.Header.Get("Content-Length") != "" {
		c.req.Header.Set("Content-Length", strconv.Itoa(len(body)))
	}
}

func (c *call) request(outputCap int64) sluice.Request {
	id := c.opts.Identity(c.req)
	if id.Model == "" {
		id.Model = c.bound.Model
	}
	if id.Route == "" {
		id.Route = c.api.Name
	}
	if c.opts.Price != nil {
		c.price = c.opts.Price(c.bound.Model)
	}
	bound := sluice.Usage{InputTokens: c.bound.InputTokens, OutputTokens: outputCap * c.bound.N}
	bound.Cost = c.price.Cost(bound)
	r := sluice.Request{Identity: id, Max: bound, OutputPrice: c.price.Output}
	if deadline, ok := c.req.Context().Deadline(); ok {
		r.Timeout = max(time.Until(deadline), time.Millisecond)
	}
	return r
}

// answer is a response the provider never sent: a refusal or a malformed request.
func (c *call) answer(status int, h http.Header, body []byte) *http.Response {
	if h == nil {
		h = http.Header{}
	}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	return &http.Response{
		Status:        strconv.Itoa(status) + " " + http.StatusText(status),
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       c.req,
	}
}

func (c *call) release() {
	if err := c.res.Release(c.settle); err != nil && c.opts.OnSettleError != nil {
		c.opts.OnSettleError(c.req, err)
	}
}

// finish settles with the usage reported, or the reservation as it stands when none was.
func (c *call) finish(u llm.Usage, reported bool) {
	var su sluice.Usage
	if min(u.InputTokens, u.OutputTokens, u.CachedInputTokens, u.CacheWriteTokens) < 0 {
		// A count the provider sent that no honest one would: charge
		// the reservation, as for a call that reported nothing.
		reported = false
	}
	if reported {
		su = sluice.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
			CachedInputTokens: u.CachedInputTokens, CacheWriteTokens: u.CacheWriteTokens}
		su.Cost = c.price.Cost(su)
	}
	if err := c.res.Settle(c.settle, su); err != nil && c.opts.OnSettleError != nil {
		c.opts.OnSettleError(c.req, err)
	}
}

func isEventStream(h http.Header) bool {
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	return mt == "text/event-stream"
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
