package gateway

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// provider is an upstream with its connection pool.
type provider struct {
	Provider
	conns upstreamConns
	// pacers map an upstream model name to its *pacer.
	pacers sync.Map
	host   string
	prefix string
	tls    bool
	scheme string // http or https
	// paths maps a route's path to the upstream path.
	paths map[string]string
	// health says whether the provider is down, from its answers.
	health providerHealth
	// circuits map an upstream model name to its *circuit; a circuit
	// opens after circuitFailures failed attempts in a row, for
	// circuitCooldown.
	circuits        sync.Map
	circuitFailures int64
	circuitCooldown time.Duration
}

// serves reports whether the provider speaks the wire format of rt.
func (p *provider) serves(rt *route) bool {
	switch p.Kind {
	case KindMock:
		return true
	case KindAnthropic:
		return rt.anthropic
	}
	return !rt.anthropic
}

func newProvider(p Provider, timeout time.Duration) (*provider, error) {
	switch p.Kind {
	case KindOpenAI, KindAnthropic, KindOpenAICompatible, KindAzure, KindMock:
	default:
		return nil, fmt.Errorf("gateway: provider %q: unknown kind %q", p.Name, p.Kind)
	}
	u, err := url.Parse(p.BaseURL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("gateway: provider %q: base URL %q must be http(s)://host[:port][/prefix]", p.Name, p.BaseURL)
	}
	pp := &provider{Provider: p, host: u.Host, prefix: strings.TrimSuffix(u.Path, "/"), tls: u.Scheme == "https", scheme: u.Scheme, paths: map[string]string{},
		circuitFailures: int64(p.CircuitFailures), circuitCooldown: p.CircuitCooldown}
	if pp.circuitFailures <= 0 {
		pp.circuitFailures = defaultCircuitFailures
	}
	if pp.circuitCooldown <= 0 {
		pp.circuitCooldown = defaultCircuitCooldown
	}
	for path := range routes {
		pp.paths[path] = pp.prefix + path
		if p.Kind == KindOpenAI || p.Kind == KindOpenAICompatible || p.Kind == KindAzure {
			// As in the OpenAI SDK, the base URL ends with the version.
			pp.paths[path] = pp.prefix + strings.TrimPrefix(path, "/v1")
		}
	}
	addr := u.Host
	if u.Port() == "" {
		if pp.tls {
			addr += ":443"
		} else {
			addr += ":80"
		}
	}
	pp.conns.max = 4096
	pp.conns.newClient = func(dial fasthttp.DialFuncWithTimeout) *fasthttp.HostClient {
		return &fasthttp.HostClient{
			Addr:                     addr,
			IsTLS:                    pp.tls,
			Name:                     "sluice",
			DialTimeout:              dial,
			MaxIdleConnDuration:      90 * time.Second,
			ReadTimeout:              timeout,
			WriteTimeout:             timeout,
			NoDefaultUserAgentHeader: true,
			DisablePathNormalizing:   true,
			MaxResponseBodySize:      256 << 20,
		}
	}
	return pp, nil
}

// prepare fills an upstream request for path with body for the provider's
// model upstream, authenticated with apiKey (the provider's, or the client's
// own), copying the client headers that the provider's API reads.
func (p *provider) prepare(req *fasthttp.Request, client *fasthttp.RequestHeader, path, upstream string, body []byte, apiKey string, stream bool) {
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI(p.uri(path, upstream))
	req.Header.SetHost(p.host)
	req.URI().SetScheme(p.scheme)
	req.Header.SetContentType("application/json")
	if stream {
		req.Header.Set("Accept", "text/event-stream")
	}
	switch p.Kind {
	case KindAnthropic:
		if apiKey != "" {
			req.Header.Set("x-api-key", apiKey)
		}
	case KindAzure:
		if apiKey != "" {
			req.Header.Set("api-key", apiKey)
		}
	default:
		if apiKey != "" {
			req.Header.Set("Authorization", "Bearer "+apiKey)
		}
	}
	// Headers that select API behaviour pass through; identity, the
	// client's Sluice key, and the client's OpenAI-Organization and
	// OpenAI-Project (which would choose the account that pays) never do.
	// The client's W3C trace context goes on to the provider, so a trace
	// spans the gateway.
	for _, name := range []string{"anthropic-version", "anthropic-beta", "OpenAI-Beta", "Idempotency-Key", "traceparent", "tracestate"} {
		if v := client.Peek(name); len(v) > 0 {
			req.Header.SetBytesV(name, v)
		}
	}
	if p.Kind == KindOpenAI || p.Kind == KindOpenAICompatible {
		if p.Organization != "" {
			req.Header.Set("OpenAI-Organization", p.Organization)
		}
		if p.Project != "" {
			req.Header.Set("OpenAI-Project", p.Project)
		}
	}
	if p.Kind == KindAnthropic && len(req.Header.Peek("anthropic-version")) == 0 {
		req.Header.Set("anthropic-version", "2023-06-01")
	}
	req.SetBodyRaw(body)
}

// uri is the upstream request URI of a route's path for model upstream:
// the path under the base URL, or for an Azure provider with an API
// version, its deployment's (the Responses API is not per deployment).
func (p *provider) uri(path, upstream string) string {
	if p.Kind != KindAzure || p.APIVersion == "" {
		return p.paths[path]
	}
	rest := strings.TrimPrefix(path, "/v1")
	if rest == "/responses" {
		return p.prefix + "/openai" + rest + "?api-version=" + url.QueryEscape(p.APIVersion)
	}
	return p.prefix + "/openai/deployments/" + url.PathEscape(upstream) + rest + "?api-version=" + url.QueryEscape(p.APIVersion)
}

// backoff returns the pause before upstream attempt n (1-based): full
// jitter over an exponential capped at max.
func backoff(n int, base, max time.Duration) time.Duration {
	d := base << (n - 1)
	if d <= 0 || d > max {
		d = max
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

// retryHint reads a provider's retry hint: retry-after-ms, else
// Retry-After in seconds or as an HTTP date.
func retryHint(h *fasthttp.ResponseHeader, now time.Time) (time.Duration, bool) {
	if v := h.Peek("retry-after-ms"); len(v) > 0 {
		if ms, err := strconv.ParseFloat(string(v), 64); err == nil && ms >= 0 && ms < 1e9 {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := string(h.Peek("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 && s < 1e6 {
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// hopByHop are response headers the gateway does not copy from upstream.
var hopByHop = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Transfer-Encoding": true, "Content-Length": true,
	"Upgrade": true, "Proxy-Authenticate": true, "Trailer": true, "Te": true, "Server": true, "Date": true,
	"X-Ratelimit-Limit": true, "X-Ratelimit-Remaining": true, "X-Ratelimit-Reset": true,
	// The provider's own limits are the operator's account's: the client
	// is told Sluice's.
	"X-Ratelimit-Limit-Requests": true, "X-Ratelimit-Remaining-Requests": true, "X-Ratelimit-Reset-Requests": true,
	"X-Ratelimit-Limit-Tokens": true, "X-Ratelimit-Remaining-Tokens": true, "X-Ratelimit-Reset-Tokens": true,
	"Ratelimit": true, "Ratelimit-Policy": true,
}
