package llm

import (
	"bytes"

	"github.com/sluicehq/sluice/llm/internal/jsonscan"
)

// quotaCodes are the error types and codes, in the OpenAI shape
// ({"error":{"type","code"}}), that say the account cannot spend any more:
// waiting for a rate window does not clear them.
var quotaCodes = map[string]bool{
	"insufficient_quota":                true, // OpenAI: no credit left, or the plan's quota used
	"credit_balance_exhausted":          true, // OpenAI: prepaid credit used up
	"billing_hard_limit_reached":        true, // OpenAI: the organization's hard spend limit
	"organization_usage_limit_exceeded": true, // OpenAI: a usage limit set on the organization
	"organization_spend_limit_exceeded": true, // OpenAI: a spend limit set on the organization
	"project_spend_limit_exceeded":      true, // OpenAI: a spend limit set on the project
	"budget_exceeded":                   true, // Sluice and other gateways: a budget rule refused
	"budget_insufficient":               true, // Sluice: the call does not fit what the budget has left
}

// QuotaCode reports whether an error answer (status, body, and whether it
// carried a retry hint: retry-after or retry-after-ms) says the
// provider's account, or a gateway's budget, cannot spend any more, which
// waiting does not fix; it returns the code that says so, or "" when the
// answer is anything else (a rate limit, an overload, not JSON). It is the
// one list of such errors: the gateway passes them on as terminal instead
// of retrying, and the retry package gives up on them. It reads:
//   - the OpenAI shape: error.code or error.type among OpenAI's quota and
//     billing codes (insufficient_quota, credit_balance_exhausted,
//     billing_hard_limit_reached, organization_usage_limit_exceeded,
//     organization_spend_limit_exceeded, project_spend_limit_exceeded) and
//     Sluice's budget codes (budget_exceeded, budget_insufficient);
//   - the Anthropic shape: error.type billing_error; a 400
//     invalid_request_error whose message names the credit balance ("Your
//     credit balance is too low ...") or the API usage limits set in the
//     console ("You have reached your specified API usage limits");
//     error.details.error_code enforced_spend_limit_reached (the usage
//     tier's monthly cap: the same 429 and rate_limit_error as a rate
//     limit, but no retry-after); and any 429 rate_limit_error without a
//     retry hint, which is how the spend cap answers when it names no code:
//     Anthropic's rate limits always say when to come back, the spend cap
//     never does, and retrying it fails until access resumes.
func QuotaCode(status int, hinted bool, body []byte) string {
	if status < 400 {
		return ""
	}
	e := jsonscan.Lookup(body, jsonscan.SkipSpace(body, 0), "error")
	if e < 0 {
		return ""
	}
	typ := string(jsonscan.StringAt(body, jsonscan.Lookup(body, e, "type")))
	if code := string(jsonscan.StringAt(body, jsonscan.Lookup(body, e, "code"))); quotaCodes[code] {
		return code
	}
	switch {
	case quotaCodes[typ]:
		return typ
	case typ == "billing_error":
		return typ
	case status == 400 && typ == "invalid_request_error":
		msg := bytes.ToLower(jsonscan.StringAt(body, jsonscan.Lookup(body, e, "message")))
		if bytes.Contains(msg, []byte("credit balance")) {
			return "credit_balance_too_low"
		}
		if bytes.Contains(msg, []byte("api usage limits")) {
			return "api_usage_limits_reached"
		}
	}
	if d := jsonscan.Lookup(body, e, "details"); d >= 0 {
		if code := string(jsonscan.StringAt(body, jsonscan.Lookup(body, d, "error_code"))); code == "enforced_spend_limit_reached" {
			return code
		}
	}
	anthropic := string(jsonscan.StringAt(body, jsonscan.Lookup(body, jsonscan.SkipSpace(body, 0), "type"))) == "error"
	if status == 429 && !hinted && anthropic && typ == "rate_limit_error" {
		return "spend_cap_without_retry_after"
	}
	return ""
}
