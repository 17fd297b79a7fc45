package llm_test

import (
	"testing"

	"github.com/sluicehq/sluice/llm"
	"github.com/sluicehq/sluice/llm/anthropic"
)

// quotaBodies are error answers as providers send them, and the code
// QuotaCode finds in each ("" for none).
var quotaBodies = []struct {
	name   string
	status int
	body   string
	want   string
	// unhinted: the answer carried no retry-after.
	unhinted bool
}{
	// OpenAI.
	{"OpenAIQuota", 429, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`, "insufficient_quota", false},
	{"OpenAIQuotaCodeOnly", 429, `{"error":{"code":"insufficient_quota"}}`, "insufficient_quota", false},
	{"OpenAICreditBalanceExhausted", 429, `{"error":{"message":"You have no credits left.","type":"insufficient_quota","code":"credit_balance_exhausted"}}`, "credit_balance_exhausted", false},
	{"OpenAIOrgUsageLimit", 429, `{"error":{"message":"Usage limit reached.","type":"requests","code":"organization_usage_limit_exceeded"}}`, "organization_usage_limit_exceeded", false},
	{"OpenAIOrgSpendLimit", 429, `{"error":{"message":"Spend limit reached.","type":"tokens","code":"organization_spend_limit_exceeded"}}`, "organization_spend_limit_exceeded", false},
	{"OpenAIProjectSpendLimit", 429, `{"error":{"message":"Project spend limit reached.","code":"project_spend_limit_exceeded"}}`, "project_spend_limit_exceeded", false},
	{"OpenAIHardLimit", 400, `{"error":{"code":"billing_hard_limit_reached","message":"Billing hard limit has been reached","param":null,"type":"invalid_request_error"}}`, "billing_hard_limit_reached", false},
	{"OpenAIRateLimit", 429, `{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 30000, Requested 1200.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`, "", false},
	{"OpenAIServerError", 500, `{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}`, "", false},
	// Sluice (or another gateway) upstream.
	{"SluiceBudget", 429, `{"error":{"message":"Budget exhausted.","type":"budget_exceeded","code":"budget_exceeded","param":null}}`, "budget_exceeded", false},
	{"SluiceBudgetTerminal402", 402, `{"error":{"message":"Budget exhausted.","type":"budget_exceeded","code":"budget_exceeded","param":null}}`, "budget_exceeded", false},
	// Anthropic.
	{"AnthropicCreditBalance", 400, string(anthropic.ErrorBody("invalid_request_error", anthropic.CreditBalanceMessage, nil)), "credit_balance_too_low", false},
	{"AnthropicBillingError", 402, `{"type":"error","error":{"type":"billing_error","message":"There is an issue with your billing."}}`, "billing_error", false},
	{"AnthropicSpendLimitSet", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified API usage limits. You will regain access on 2026-12-01 at 00:00 UTC."}}`, "api_usage_limits_reached", false},
	{"AnthropicWorkspaceSpendLimit", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified workspace API usage limits. You will regain access on 2026-12-01 at 00:00 UTC."}}`, "api_usage_limits_reached", false},
	{"AnthropicTierSpendCap", 429, `{"type":"error","error":{"type":"rate_limit_error","message":"You have reached your monthly spend limit.","details":{"error_code":"enforced_spend_limit_reached"}}}`, "enforced_spend_limit_reached", false},
	{"AnthropicOtherBadRequest", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}`, "", false},
	{"AnthropicRateLimit", 429, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`, "", false},
	{"AnthropicRateLimitOtherDetails", 429, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down","details":{"error_code":"output_tokens_per_minute"}}}`, "", false},
	{"AnthropicOverloaded", 529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, "", false},
	{"AnthropicSpendCapNoHint", 429, `{"type":"error","error":{"type":"rate_limit_error","message":"You have reached your monthly spend limit."}}`, "spend_cap_without_retry_after", true},
	{"AnthropicRateLimitNoHintIsStillOpenAIsThrottle", 429, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`, "", true},
	// Neither.
	{"NotJSON", 429, `Too Many Requests`, "", false},
	{"Success", 200, `{"error":{"code":"insufficient_quota"}}`, "", false},
}

func TestQuotaCode_ReadsEveryProvidersBodies(t *testing.T) {
	for _, c := range quotaBodies {
		if got := llm.QuotaCode(c.status, !c.unhinted, []byte(c.body)); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
