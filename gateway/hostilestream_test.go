package gateway_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/llm"
)

// hostileProvider streams first events, then one event over the gateway's
// event size cap.
func hostileProvider(t *testing.T, before int) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		anthropic := strings.HasSuffix(r.URL.Path, "/messages")
		for i := range before {
			if anthropic {
				fmt.Fprintf(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"w%d\"}}\n\n", i)
			} else {
				fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w%d\"}}]}\n\n", i)
			}
			w.(http.Flusher).Flush()
		}
		huge := strings.Repeat("x", llm.DefaultMaxEventBytes+1)
		fmt.Fprintf(w, "data: {\"text\":\"%s\"}\n\n", huge)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// An event over the size cap ends the answer cleanly: before any event, a
// 502 in the API's error shape; after some, the API's error event and a
// proper end of the stream. The reservation is charged either way (the
// provider may have done the work).
func TestGateway_OversizedProviderEvent(t *testing.T) {
	t.Parallel()
	for _, before := range []int{0, 2} {
		for _, api := range []struct{ name, path, model, body string }{
			{"chat", "/v1/chat/completions", "gpt-hostile", `{"model":"gpt-hostile","stream":true,"max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`},
			{"messages", "/v1/messages", "claude-hostile", `{"model":"claude-hostile","stream":true,"max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`},
		} {
			t.Run(fmt.Sprintf("%s after %d events", api.name, before), func(t *testing.T) {
				base := hostileProvider(t, before)
				h := startHarness(t, setup{rules: []sluice.Rule{dailyTokens}, tweak: []func(*gateway.Options){func(o *gateway.Options) {
					o.Providers = append(slices.Clone(o.Providers),
						gateway.Provider{Name: "oa", Kind: gateway.KindOpenAI, BaseURL: base + "/v1", APIKey: "sk-up"},
						gateway.Provider{Name: "an", Kind: gateway.KindAnthropic, BaseURL: base, APIKey: "sk-up"})
					o.Models = append(slices.Clone(o.Models),
						gateway.Model{Name: "gpt-hostile", Provider: "oa", MaxOutputTokens: 100},
						gateway.Model{Name: "claude-hostile", Provider: "an", MaxOutputTokens: 100})
				}}})
				req, _ := http.NewRequest(http.MethodPost, h.url+api.path, strings.NewReader(api.body))
				req.Header.Set("Authorization", "Bearer "+testKey)
				req.Header.Set("anthropic-version", "2023-06-01")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatalf("no answer: %v", err)
				}
				defer resp.Body.Close()
				if before == 0 {
					var body map[string]any
					if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != 502 {
						t.Fatalf("%d %v (%v), want a 502 with an error body", resp.StatusCode, body, err)
					}
					if _, ok := body["error"]; !ok {
						t.Fatalf("body %v is not the API's error shape", body)
					}
				} else {
					if resp.StatusCode != 200 {
						t.Fatalf("status %d, want the stream's 200", resp.StatusCode)
					}
					var lines []string
					sc := bufio.NewScanner(resp.Body)
					for sc.Scan() {
						lines = append(lines, sc.Text())
					}
					if err := sc.Err(); err != nil {
						t.Fatalf("the stream was cut, not ended: %v", err)
					}
					all := strings.Join(lines, "\n")
					if !strings.Contains(all, "w1") || !strings.Contains(all, "larger than the gateway accepts") {
						t.Fatalf("stream %q, want the events then the error event", all)
					}
					if api.name == "chat" && lines[len(lines)-2] != "data: [DONE]" {
						t.Fatalf("chat stream ends %q, want [DONE]", lines[len(lines)-2:])
					}
				}
				if ev := h.rec.waitEvents(t, 1); ev[0].Outcome != "upstream_error" {
					t.Errorf("event %+v, want upstream_error", ev[0])
				}
				if used := h.used("daily_tokens"); used <= 0 {
					t.Errorf("budget charged %d, want the call charged", used)
				}
			})
		}
	}
}
