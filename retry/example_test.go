package retry_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/retry"
)

func ExampleClassifyResponse() {
	now := time.Date(2026, 9, 20, 10, 0, 0, 0, time.UTC)

	// A rate limit: wait the hint, to the millisecond.
	rate := http.Header{"Retry-After": {"2"}, "Retry-After-Ms": {"1500"}}
	d := retry.ClassifyResponse(429, rate, nil, now)
	fmt.Println(d.Class, d.Hint)

	// A budget: the same status, but no retry will help.
	budget := http.Header{"X-Should-Retry": {"false"}}
	d = retry.ClassifyResponse(429, budget, nil, now)
	fmt.Println(d.Class, d.Reason)

	// Output:
	// throttled 1.5s
	// terminal x-should-retry: false
}

func ExampleDo() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	resp, err := retry.Do(ctx, retry.Policy{}, func(ctx context.Context) (*http.Response, error) {
		// A new request each attempt, so the body is read afresh.
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1:8080/v1/chat/completions", strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer sk-sluice-example")
		return http.DefaultClient.Do(req)
	})
	if err != nil {
		fmt.Println("call failed:", err)
		return
	}
	defer resp.Body.Close()
	if d := retry.Classify(resp, nil); d.Class == retry.Terminal {
		fmt.Println("refused for good:", d.Reason)
	}
}

func ExampleTransport() {
	client := &http.Client{
		Transport: &retry.Transport{Policy: retry.Policy{MaxAttempts: 5, MaxHint: 20 * time.Second}},
	}
	_ = client // hand it to an SDK, with the SDK's own retries off
}
