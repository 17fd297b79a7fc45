package openai

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/llm"
)

func TestRealtimeClientEvent_Appended(t *testing.T) {
	second := base64.StdEncoding.EncodeToString(make([]byte, RealtimeAudioBytesPerSecond))
	for _, tc := range []struct {
		name, event string
		want        int64
	}{
		{"instructions", `{"type":"session.update","session":{"instructions":"123456"}}`, 2},
		{"text item", `{"type":"conversation.item.create","item":{"type":"message","content":[{"type":"input_text","text":"1234567"}]}}`, 3},
		{"audio item", `{"type":"conversation.item.create","item":{"type":"message","content":[{"type":"input_audio","audio":"` + second + `"}]}}`, 10},
		{"a second of audio", `{"type":"input_audio_buffer.append","audio":"` + second + `"}`, 10},
		{"function output", `{"type":"conversation.item.create","item":{"type":"function_call_output","output":"abc"}}`, 1},
		{"nothing appended", `{"type":"response.cancel"}`, 0},
	} {
		ev, err := ParseRealtimeClientEvent([]byte(tc.event))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := ev.Appended(); got != tc.want {
			t.Errorf("%s: appended %d tokens, want %d", tc.name, got, tc.want)
		}
	}
}

func TestParseRealtimeClientEvent_NotAnEvent(t *testing.T) {
	for _, frame := range []string{"", "hello", "[]", `{"event_id":"x"}`, `{"type":7}`} {
		if _, err := ParseRealtimeClientEvent([]byte(frame)); err == nil {
			t.Errorf("%q parsed as an event", frame)
		}
	}
}

func TestRealtimeCap(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		n    int64
		set  bool
		fail bool
	}{
		{"", 0, false, false}, {"null", 0, false, false}, {`"inf"`, 0, true, false}, {"300", 300, true, false},
		{"0", 0, false, true}, {"-1", 0, false, true}, {`"lots"`, 0, false, true}, {"1.5", 0, false, true},
	} {
		n, set, err := RealtimeCap([]byte(tc.raw))
		if n != tc.n || set != tc.set || (err != nil) != tc.fail {
			t.Errorf("%q: %d %v %v", tc.raw, n, set, err)
		}
	}
}

func TestRealtimeServerEvent_UsageAndOutput(t *testing.T) {
	done, err := ParseRealtimeServerEvent([]byte(`{"type":"response.done","response":{"id":"r1","status":"completed","usage":{"total_tokens":30,
		"input_tokens":20,"output_tokens":10,"input_token_details":{"cached_tokens":8,"text_tokens":12,"audio_tokens":8,
		"cached_tokens_details":{"text_tokens":5,"audio_tokens":3}},
		"output_token_details":{"text_tokens":2,"audio_tokens":8}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	u := done.Response.Usage
	if got := u.Usage(); got != (llm.Usage{InputTokens: 20, OutputTokens: 10, CachedInputTokens: 8, AudioInputTokens: 5, AudioOutputTokens: 8}) {
		t.Fatalf("usage %+v", u)
	}
	halfSecond := base64.StdEncoding.EncodeToString(make([]byte, RealtimeAudioBytesPerSecond/2))
	for _, tc := range []struct {
		event string
		want  int64
	}{
		{`{"type":"response.output_text.delta","response_id":"r1","delta":"hi"}`, 1},
		{`{"type":"response.output_audio.delta","response_id":"r1","delta":"` + halfSecond + `"}`, 10},
		{`{"type":"response.output_audio_transcript.delta","response_id":"r1","delta":"hi"}`, 0},
	} {
		ev, err := ParseRealtimeServerEvent([]byte(tc.event))
		if err != nil {
			t.Fatal(err)
		}
		if got := ev.OutputSoFar(); got != tc.want {
			t.Errorf("%.60s: %d output tokens, want %d", tc.event, got, tc.want)
		}
	}
}

// FuzzRealtimeEvents: a client's or a provider's frame never panics the
// parsers, and what they estimate is never negative.
func FuzzRealtimeEvents(f *testing.F) {
	f.Add([]byte(`{"type":"response.create","response":{"max_output_tokens":"inf","instructions":"x","input":[]}}`))
	f.Add([]byte(`{"type":"conversation.item.create","item":{"content":[{"text":"hi","audio":"AAAA"}]}}`))
	f.Add([]byte(`{"type":"response.done","response":{"usage":{"input_tokens":-1}}}`))
	f.Add([]byte(`{"type":"response.output_audio.delta","delta":"` + strings.Repeat("A", 64) + `"}`))
	f.Fuzz(func(t *testing.T, frame []byte) {
		if ev, err := ParseRealtimeClientEvent(frame); err == nil {
			if ev.Appended() < 0 || ev.ResponseExtra() < 0 {
				t.Fatalf("negative estimate for %q", frame)
			}
			if ev.Response != nil {
				if n, _, err := RealtimeCap(ev.Response.MaxOutputTokens); err == nil && n < 0 {
					t.Fatalf("negative cap for %q", frame)
				}
			}
		}
		if ev, err := ParseRealtimeServerEvent(frame); err == nil && ev.OutputSoFar() < 0 {
			t.Fatalf("negative output for %q", frame)
		}
	})
}

// A delta is read in one pass, copying nothing of its delta; every other
// event is decoded.
func TestParseRealtimeServerEvent_Delta(t *testing.T) {
	ev, err := ParseRealtimeServerEvent([]byte(`{"delta":"AAAA","event_id":"e1","response_id":"r9","type":"response.output_audio.delta"}`))
	if err != nil || ev.Type != "response.output_audio.delta" || ev.ResponseID != "r9" || ev.DeltaBytes != 4 {
		t.Fatalf("%+v, %v", ev, err)
	}
	frame := []byte(`{"type":"response.output_audio.delta","response_id":"r9","delta":"` + strings.Repeat("A", 4096) + `"}`)
	allocs := testing.AllocsPerRun(100, func() { _, _ = ParseRealtimeServerEvent(frame) })
	if allocs > 3 { // the type's, the id's, and the walk's closure
		t.Fatalf("%v allocations to read a delta", allocs)
	}
	if _, err := ParseRealtimeServerEvent([]byte(`{"type":"response.output_text.delta","delta":`)); err == nil {
		t.Fatal("a cut delta parsed")
	}
}
