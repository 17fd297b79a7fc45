package llm

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestEventReader_Splits(t *testing.T) {
	stream := "event: message_start\ndata: {\"a\":1}\n\n" +
		": keep-alive\n\n" +
		"data: line1\r\ndata: line2\r\n\r\n" +
		"data:nospace\nid: 7\nretry: 10\n\n" +
		"data: [DONE]\n\n"
	type ev struct{ name, data, raw string }
	want := []ev{
		{"message_start", `{"a":1}`, "event: message_start\ndata: {\"a\":1}\n\n"},
		{"", "", ": keep-alive\n\n"},
		{"", "line1\nline2", "data: line1\r\ndata: line2\r\n\r\n"},
		{"", "nospace", "data:nospace\nid: 7\nretry: 10\n\n"},
		{"", "[DONE]", "data: [DONE]\n\n"},
	}
	r := NewEventReader(bufio.NewReaderSize(strings.NewReader(stream), 16))
	for i, w := range want {
		e, err := r.Next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if string(e.Name) != w.name || string(e.Data) != w.data || string(e.Raw) != w.raw {
			t.Errorf("event %d = {%q %q %q}, want %+v", i, e.Name, e.Data, e.Raw, w)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Errorf("after last event: %v, want io.EOF", err)
	}
}

func TestEventReader_DataPresence(t *testing.T) {
	r := NewEventReader(bufio.NewReader(strings.NewReader("data:\n\n: c\n\n")))
	e, _ := r.Next()
	if e.Data == nil || len(e.Data) != 0 {
		t.Errorf("empty data field: Data = %q (nil %v), want empty non-nil", e.Data, e.Data == nil)
	}
	e, _ = r.Next()
	if e.Data != nil {
		t.Errorf("comment: Data = %q, want nil", e.Data)
	}
}

func TestEventReader_TruncatedEvent(t *testing.T) {
	r := NewEventReader(bufio.NewReader(strings.NewReader("data: a\n\ndata: part")))
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	e, err := r.Next()
	if !errors.Is(err, io.ErrUnexpectedEOF) || string(e.Raw) != "data: part" || string(e.Data) != "part" {
		t.Errorf("truncated: %q %q %v", e.Raw, e.Data, err)
	}
}

func TestEventReader_TooLarge(t *testing.T) {
	r := NewEventReader(bufio.NewReaderSize(strings.NewReader("data: "+strings.Repeat("x", 100)+"\n\n"), 16))
	r.MaxEventBytes = 50
	if _, err := r.Next(); !errors.Is(err, ErrEventTooLarge) {
		t.Errorf("err = %v, want ErrEventTooLarge", err)
	}
}

func TestAppendEvent_RoundTrip(t *testing.T) {
	cases := []struct{ name, data string }{{"", "x"}, {"ping", "a\nb"}, {"e", ""}}
	for _, c := range cases {
		raw := AppendEvent(nil, []byte(c.name), []byte(c.data))
		e, err := NewEventReader(bufio.NewReader(strings.NewReader(string(raw)))).Next()
		if err != nil || string(e.Name) != c.name || string(e.Data) != c.data || string(e.Raw) != string(raw) {
			t.Errorf("%+v: got {%q %q %q} %v", c, e.Name, e.Data, e.Raw, err)
		}
	}
}

func FuzzEventReader(f *testing.F) {
	f.Add([]byte("event: a\ndata: b\n\ndata: c\r\n\r\n: x\n\ndata"))
	f.Add([]byte("\n\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := NewEventReader(bufio.NewReaderSize(strings.NewReader(string(b)), 16))
		total := 0
		for {
			e, err := r.Next()
			total += len(e.Raw)
			if err != nil {
				break
			}
		}
		if total != len(b) {
			t.Fatalf("raw bytes %d, input %d", total, len(b))
		}
	})
}

func TestForward_RawUnlessChanged(t *testing.T) {
	r := NewEventReader(bufio.NewReader(strings.NewReader("event: x\ndata:a\n\n: ping\n\n")))
	e, _ := r.Next()
	if got := string(Forward(e, e.Data)); got != "event: x\ndata:a\n\n" {
		t.Errorf("unchanged: %q", got)
	}
	if got := string(Forward(e, []byte("b"))); got != "event: x\ndata: b\n\n" {
		t.Errorf("changed: %q", got)
	}
	if got := Forward(e, nil); got != nil {
		t.Errorf("dropped: %q", got)
	}
	e, _ = r.Next()
	if got := string(Forward(e, nil)); got != ": ping\n\n" {
		t.Errorf("comment: %q", got)
	}
}
