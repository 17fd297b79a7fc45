package retry_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/retry"
)

// epoch is the fixed "now" of classification tests.
var epoch = time.Date(2026, 9, 20, 10, 0, 0, 0, time.UTC)

// OpenAI's body for an account with no credit left, as the API sends it.
const insufficientQuotaBody = `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`

// OpenAI's body for an ordinary rate limit.
const rateLimitBody = `{"error":{"message":"Rate limit reached for gpt-4o","type":"requests","param":null,"code":"rate_limit_exceeded"}}`

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestClassifyResponse_Classes(t *testing.T) {
	tests := []struct {
		name   string
		status int
		header http.Header
		body   string
		want   retry.Class
		reason string
	}{
		{"ok", 200, nil, "", retry.Success, ""},
		{"not modified", 304, nil, "", retry.Success, ""},
		{"success ignores x-should-retry", 200, header("x-should-retry", "false"), "", retry.Success, ""},
		{"request timeout", 408, nil, "", retry.Transient, "status 408"},
		{"conflict (lock)", 409, nil, "", retry.Transient, "status 409"},
		{"internal error", 500, nil, "", retry.Transient, "status 500"},
		{"bad gateway", 502, nil, "", retry.Transient, "status 502"},
		{"unavailable", 503, nil, "", retry.Transient, "status 503"},
		{"gateway timeout", 504, nil, "", retry.Transient, "status 504"},
		{"anthropic overloaded", 529, nil, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, retry.Transient, "status 529"},
		{"not implemented", 501, nil, "", retry.Terminal, "status 501"},
		{"bad request", 400, nil, "", retry.Terminal, "status 400"},
		{"bad key", 401, nil, "", retry.Terminal, "status 401"},
		{"model not allowed", 403, nil, "", retry.Terminal, "status 403"},
		{"not found", 404, nil, "", retry.Terminal, "status 404"},
		{"never fits", 413, header("x-should-retry", "false"), "", retry.Terminal, "x-should-retry: false"},
		{"unprocessable", 422, nil, "", retry.Terminal, "status 422"},
		{"rate limited", 429, header("Retry-After", "3"), rateLimitBody, retry.Throttled, "status 429"},
		{"rate limited without hint", 429, nil, rateLimitBody, retry.Throttled, "status 429"},
		{"sluice budget exhausted", 429, header("x-should-retry", "false"), `{"error":{"type":"budget_exceeded"}}`, retry.Terminal, "x-should-retry: false"},
		{"x-should-retry false beats Retry-After", 429, header("x-should-retry", "false", "Retry-After", "3"), "", retry.Terminal, "x-should-retry: false"},
		{"x-should-retry is case-insensitive", 503, header("x-should-retry", " FALSE "), "", retry.Terminal, "x-should-retry: false"},
		{"x-should-retry false on 5xx", 500, header("x-should-retry", "false"), "", retry.Terminal, "x-should-retry: false"},
		{"openai insufficient_quota", 429, nil, insufficientQuotaBody, retry.Terminal, "insufficient_quota"},
		{"quota beats Retry-After", 429, header("Retry-After", "20"), insufficientQuotaBody, retry.Terminal, "insufficient_quota"},
		{"hard spend limit code", 429, nil, `{"error":{"type":"invalid_request_error","code":"billing_hard_limit_reached"}}`, retry.Terminal, "billing_hard_limit_reached"},
		{"budget in anthropic shape", 429, nil, `{"type":"error","error":{"type":"budget_exceeded","message":"daily budget reached"}}`, retry.Terminal, "budget_exceeded"},
		{"error as a string", 429, nil, `{"error":"rate limit reached: 20 requests per minute"}`, retry.Throttled, "status 429"},
		{"numeric code", 429, nil, `{"error":{"code":429,"status":"RESOURCE_EXHAUSTED"}}`, retry.Throttled, "status 429"},
		{"not json", 429, nil, `<html>too many</html>`, retry.Throttled, "status 429"},
		{"x-should-retry true forces a retry", 400, header("x-should-retry", "true"), "", retry.Transient, "x-should-retry: true"},
		{"x-should-retry true beats a quota body", 429, header("x-should-retry", "true"), insufficientQuotaBody, retry.Throttled, "x-should-retry: true"},
		{"unknown x-should-retry is ignored", 401, header("x-should-retry", "maybe"), "", retry.Terminal, "status 401"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := retry.ClassifyResponse(tt.status, tt.header, []byte(tt.body), epoch)
			if got.Class != tt.want || got.Reason != tt.reason {
				t.Errorf("ClassifyResponse(%d) = %v (%q), want %v (%q)", tt.status, got.Class, got.Reason, tt.want, tt.reason)
			}
			if got.Retryable() != (tt.want == retry.Transient || tt.want == retry.Throttled) {
				t.Errorf("Retryable() = %v for class %v", got.Retryable(), got.Class)
			}
		})
	}
}

func TestClassifyResponse_Hint(t *testing.T) {
	tests := []struct {
		name     string
		status   int
		header   http.Header
		wantHint time.Duration
		wantHas  bool
	}{
		{"retry-after-ms", 429, header("retry-after-ms", "1500"), 1500 * time.Millisecond, true},
		{"retry-after-ms fraction", 429, header("retry-after-ms", "250.5"), 250500 * time.Microsecond, true},
		{"retry-after-ms before Retry-After", 429, header("Retry-After", "2", "retry-after-ms", "1500"), 1500 * time.Millisecond, true},
		{"bad retry-after-ms falls back", 429, header("retry-after-ms", "soon", "Retry-After", "2"), 2 * time.Second, true},
		{"negative retry-after-ms falls back", 429, header("retry-after-ms", "-5", "Retry-After", "2"), 2 * time.Second, true},
		{"Retry-After seconds", 429, header("Retry-After", "3"), 3 * time.Second, true},
		{"Retry-After zero", 429, header("Retry-After", "0"), 0, true},
		{"Retry-After date", 429, header("Retry-After", epoch.Add(10*time.Second).Format(http.TimeFormat)), 10 * time.Second, true},
		{"Retry-After date in the past", 429, header("Retry-After", epoch.Add(-time.Minute).Format(http.TimeFormat)), 0, true},
		{"Retry-After negative", 429, header("Retry-After", "-1"), 0, false},
		{"Retry-After garbage", 429, header("Retry-After", "later"), 0, false},
		{"NaN is no hint", 429, header("retry-after-ms", "NaN"), 0, false},
		{"huge hint saturates", 429, header("retry-after-ms", "1e30"), time.Duration(math.MaxInt64), true},
		{"no header", 429, nil, 0, false},
		{"store unavailable 503", 503, header("Retry-After", "1"), time.Second, true},
		{"forced retry keeps the hint", 400, header("x-should-retry", "true", "retry-after-ms", "20"), 20 * time.Millisecond, true},
		{"terminal carries no hint", 429, header("x-should-retry", "false", "Retry-After", "5"), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := retry.ClassifyResponse(tt.status, tt.header, nil, epoch)
			if got.Hint != tt.wantHint || got.HasHint != tt.wantHas {
				t.Errorf("hint = %v, %v; want %v, %v", got.Hint, got.HasHint, tt.wantHint, tt.wantHas)
			}
		})
	}
}

func TestClassifyError_Classes(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	tests := []struct {
		name string
		err  error
		want retry.Class
	}{
		{"caller cancelled", &url.Error{Op: "Post", URL: "http://x", Err: context.Canceled}, retry.Terminal},
		{"per-attempt deadline", &url.Error{Op: "Post", URL: "http://x", Err: context.DeadlineExceeded}, retry.Transient},
		{"connection refused", &url.Error{Op: "Post", URL: "http://x", Err: refused}, retry.Transient},
		{"connection reset", fmt.Errorf("read: %w", syscall.ECONNRESET), retry.Transient},
		{"truncated body", io.ErrUnexpectedEOF, retry.Transient},
		{"unknown authority", &url.Error{Op: "Get", URL: "https://x", Err: x509.UnknownAuthorityError{}}, retry.Terminal},
		{"certificate verification", &tls.CertificateVerificationError{Err: errors.New("expired")}, retry.Terminal},
		{"no error", nil, retry.Success},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := retry.ClassifyError(tt.err); got.Class != tt.want {
				t.Errorf("ClassifyError(%v) = %v (%s), want %v", tt.err, got.Class, got.Reason, tt.want)
			}
			if got := retry.Classify(nil, tt.err); tt.err != nil && got.Class != tt.want {
				t.Errorf("Classify(nil, %v) = %v, want %v", tt.err, got.Class, tt.want)
			}
		})
	}
}

func TestClassify_BudgetIsTerminal(t *testing.T) {
	resp := &http.Response{
		StatusCode: http.StatusTooManyRequests,
		Header:     http.Header{},
		Body:       io.NopCloser(strings.NewReader(insufficientQuotaBody)),
	}
	if got := retry.Classify(resp, nil); got.Class != retry.Terminal || got.Reason != "insufficient_quota" {
		t.Fatalf("Classify = %v (%s), want terminal (insufficient_quota)", got.Class, got.Reason)
	}
	// The peek must leave the whole body for the caller.
	body, err := io.ReadAll(resp.Body)
	if err != nil || string(body) != insufficientQuotaBody {
		t.Fatalf("body after Classify = %q, %v; want the original body", body, err)
	}
	if err := resp.Body.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func TestClassify_LongBodyIsPutBackWhole(t *testing.T) {
	long := strings.Repeat("x", 200<<10)
	resp := &http.Response{StatusCode: 429, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(long))}
	if got := retry.Classify(resp, nil); got.Class != retry.Throttled {
		t.Fatalf("Classify = %v, want throttled", got.Class)
	}
	body, _ := io.ReadAll(resp.Body)
	if len(body) != len(long) {
		t.Fatalf("read %d bytes after Classify, want %d", len(body), len(long))
	}
}

func TestClassify_NothingIsTerminal(t *testing.T) {
	if got := retry.Classify(nil, nil); got.Class != retry.Terminal {
		t.Fatalf("Classify(nil, nil) = %v, want terminal", got.Class)
	}
}

func TestClass_String(t *testing.T) {
	for class, want := range map[retry.Class]string{
		retry.Success: "success", retry.Transient: "transient", retry.Throttled: "throttled",
		retry.Terminal: "terminal", retry.Class(9): "class(9)",
	} {
		if got := class.String(); got != want {
			t.Errorf("Class(%d).String() = %q, want %q", int(class), got, want)
		}
	}
}

func FuzzClassifyResponse(f *testing.F) {
	f.Add(429, "1500", "3", "", []byte(rateLimitBody))
	f.Add(429, "", "", "", []byte(insufficientQuotaBody))
	f.Add(503, "", "Sun, 20 Sep 2026 10:00:05 GMT", "", []byte(nil))
	f.Add(400, "", "", "true", []byte(`{"error":{"code":null}}`))
	f.Add(429, "1e400", "-0", "false", []byte(`{"error":[]}`))
	f.Fuzz(func(t *testing.T, status int, retryAfterMs, retryAfter, shouldRetry string, body []byte) {
		h := header("retry-after-ms", retryAfterMs, "Retry-After", retryAfter, "x-should-retry", shouldRetry)
		d := retry.ClassifyResponse(status, h, body, epoch)
		if d.Class < retry.Success || d.Class > retry.Terminal {
			t.Fatalf("class %d out of range", d.Class)
		}
		if status < 400 && d.Class != retry.Success {
			t.Fatalf("status %d classified %v", status, d.Class)
		}
		if status >= 400 && strings.EqualFold(strings.TrimSpace(shouldRetry), "false") && d.Class != retry.Terminal {
			t.Fatalf("x-should-retry: false classified %v", d.Class)
		}
		if d.Hint < 0 || (!d.HasHint && d.Hint != 0) {
			t.Fatalf("hint %v, has %v", d.Hint, d.HasHint)
		}
		if delay, ok := (retry.Policy{MaxHint: math.MaxInt64}).Delay(1, d); ok && d.HasHint && delay < d.Hint {
			t.Fatalf("delay %v earlier than hint %v", delay, d.Hint)
		}
	})
}

// The spend caps of both providers are terminal here as in the gateway
// (llm.QuotaCode is the one list): Anthropic's says so in its details, or
// by a rate_limit_error without retry-after; a rate limit with its hint is
// not.
func TestClassifyResponse_ProviderSpendCapsAreTerminal(t *testing.T) {
	const anthropicRate = `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`
	cases := []struct {
		name       string
		body       string
		retryAfter string
		want       retry.Class
	}{
		{"AnthropicTierSpendCap", `{"type":"error","error":{"type":"rate_limit_error","message":"You have reached your monthly spend limit.","details":{"error_code":"enforced_spend_limit_reached"}}}`, "", retry.Terminal},
		{"AnthropicRateLimitWithoutHint", anthropicRate, "", retry.Terminal},
		{"AnthropicRateLimit", anthropicRate, "1", retry.Throttled},
		{"OpenAIProjectSpendLimit", `{"error":{"message":"Project spend limit reached.","code":"project_spend_limit_exceeded"}}`, "", retry.Terminal},
		{"OpenAICreditBalanceExhausted", `{"error":{"message":"You have no credits left.","type":"insufficient_quota","code":"credit_balance_exhausted"}}`, "", retry.Terminal},
		{"OpenAIRateLimitWithoutHint", `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`, "", retry.Throttled},
	}
	for _, c := range cases {
		h := http.Header{}
		if c.retryAfter != "" {
			h.Set("Retry-After", c.retryAfter)
		}
		if d := retry.ClassifyResponse(429, h, []byte(c.body), time.Now()); d.Class != c.want {
			t.Errorf("%s: %v, want %v", c.name, d.Class, c.want)
		}
	}
}
