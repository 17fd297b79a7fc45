package anthropic

import "testing"

func TestErrorBody_Shape(t *testing.T) {
	cases := []struct{ got, want string }{
		{string(ErrorBody("rate_limit_error", "Slow down.", map[string]int{"retry_after_ms": 5})),
			`{"type":"error","error":{"type":"rate_limit_error","message":"Slow down.","limit":{"retry_after_ms":5}}}`},
		{string(ErrorBody("invalid_request_error", "Bad.", nil)),
			`{"type":"error","error":{"type":"invalid_request_error","message":"Bad."}}`},
		{string(ErrorBody("x", "y", func() {})), `{"type":"error","error":{"type":"x","message":"y"}}`},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s\nwant %s", c.got, c.want)
		}
	}
}

func TestIsQuotaError_Classifies(t *testing.T) {
	credit := string(ErrorBody("invalid_request_error", CreditBalanceMessage, nil))
	cases := []struct {
		name   string
		status int
		body   string
		want   bool
	}{
		{"CreditBalance", 400, credit, true},
		{"BillingError", 402, `{"type":"error","error":{"type":"billing_error","message":"There is an issue with your billing."}}`, true},
		{"OtherBadRequest", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}`, false},
		{"RateLimit", 429, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`, false},
		{"SpendLimitSet", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified API usage limits. You will regain access on 2026-12-01 at 00:00 UTC."}}`, true},
		{"WorkspaceSpendLimitSet", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified workspace API usage limits. You will regain access on 2026-12-01 at 00:00 UTC."}}`, true},
		{"TierSpendCap", 429, `{"type":"error","error":{"type":"rate_limit_error","message":"You have reached your monthly spend limit.","details":{"error_code":"enforced_spend_limit_reached"}}}`, true},
		{"RateLimitWithOtherDetails", 429, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down","details":{"error_code":"output_tokens_per_minute"}}}`, false},
		{"Overloaded", 529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, false},
		{"NotJSON", 400, `bad`, false},
	}
	for _, c := range cases {
		if got := IsQuotaError(c.status, []byte(c.body)); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
