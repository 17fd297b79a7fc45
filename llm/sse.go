package llm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Event is one server-sent event.
type Event struct {
	// Name is the value of the event field, nil when absent.
	Name []byte
	// Data is the event's data lines joined with "\n", nil when it had none (a comment or a
	// keep-alive).
	Data []byte
	// Raw is every byte of the event as read, the blank line that ends it included, so an
	// unchanged event is forwarded byte for byte.
	Raw []byte
}

// DefaultMaxEventBytes is the largest event an EventReader accepts unless told otherwise.
const DefaultMaxEventBytes = 16 << 20

// ErrEventTooLarge is returned by EventReader.Next for an event larger than its limit.
var ErrEventTooLarge = errors.New("sse: event too large")

// EventReader splits a server-sent event stream into events. It returns each event as soon as
// the blank line that ends it has been read and holds nothing beyond that event. Lines may end
// in "\n" or "\r\n" (a bare "\r" line ending is not supported). An EventReader is not safe for
// concurrent use.
type EventReader struct {
	r *bufio.Reader
	// MaxEventBytes bounds one event's raw size; 0 means DefaultMaxEventBytes.
	MaxEventBytes int

	raw  []byte
	data []byte
}

// NewEventReader returns a reader of the events in r.
func NewEventReader(r *bufio.Reader) *EventReader {
	return &EventReader{r: r}
}

// Next reads the next event. The slices of the returned Event are valid until the next call.
// At the end of the stream Next returns io.EOF; a stream that ends inside an event returns what
// was read of it together with io.ErrUnexpectedEOF, so the caller can still forward Raw.
func (r *EventReader) Next() (Event, error) {
	limit := r.MaxEventBytes
	if limit <= 0 {
		limit = DefaultMaxEventBytes
	}
	r.raw = r.raw[:0]
	r.data = r.data[:0]
	hasData := false
	nameStart, nameEnd := -1, -1
	for {
		lineStart := len(r.raw)
		for {
			chunk, err := r.r.ReadSlice('\n')
			if len(r.raw)+len(chunk) > limit {
				return Event{}, fmt.Errorf("read event: %w", ErrEventTooLarge)
			}
			r.raw = append(r.raw, chunk...)
			if err == nil {
				break
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if errors.Is(err, io.EOF) {
				if len(r.raw) == 0 {
					return Event{}, io.EOF
				}
				r.parseLine(lineStart, &hasData, &nameStart, &nameEnd)
				return r.event(hasData, nameStart, nameEnd), io.ErrUnexpectedEOF
			}
			return Event{}, fmt.Errorf("read event: %w", err)
		}
		if r.parseLine(lineStart, &hasData, &nameStart, &nameEnd) {
			return r.event(hasData, nameStart, nameEnd), nil
		}
	}
}

// parseLine interprets r.raw[lineStart:] and reports whether it was the blank line that ends an
// event.
func (r *EventReader) parseLine(lineStart int, hasData *bool, nameStart, nameEnd *int) bool {
	end := len(r.raw)
	if end > lineStart && r.raw[end-1] == '\n' {
		end--
	}
	if end > lineStart && r.raw[end-1] == '\r' {
		end--
	}
	line := r.raw[lineStart:end]
	if len(line) == 0 {
		return true
	}
	if line[0] == ':' {
		return false
	}
	field, value := line, line[len(line):]
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		field, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(field) {
	case "data":
		if *hasData {
			r.data = append(r.data, '\n')
		}
		r.data = append(r.data, value...)
		*hasData = true
	case "event":
		*nameStart = end - len(value)
		*nameEnd = end
	}
	return false
}

func (r *EventReader) event(hasData bool, nameStart, nameEnd int) Event {
	ev := Event{Raw: r.raw}
	if hasData {
		ev.Data = r.data
		if ev.Data == nil {
			ev.Data = r.raw[:0]
		}
	}
	if nameStart >= 0 {
		ev.Name = r.raw[nameStart:nameEnd]
	}
	return ev
}

// AppendEvent appends a server-sent event with the given name (omitted when empty) and data to
// dst, one data line per line of data, and the blank line that ends it.
func AppendEvent(dst, name, data []byte) []byte {
	if len(name) > 0 {
		dst = append(dst, "event: "...)
		dst = append(dst, name...)
		dst = append(dst, '\n')
	}
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		dst = append(dst, "data: "...)
		dst = append(dst, data[:i]...)
		dst = append(dst, '\n')
		data = data[i+1:]
	}
	dst = append(dst, "data: "...)
	dst = append(dst, data...)
	return append(dst, '\n', '\n')
}

// Forward returns the bytes to send the client for event e once a stream follower (such as
// openai.ChatStream) turned its data into data: e.Raw, byte for byte, when e carries no data
// or data is e.Data unchanged; nil when data is nil (the event is dropped); otherwise the event
// framed anew with AppendEvent.
func Forward(e Event, data []byte) []byte {
	switch {
	case e.Data == nil:
		return e.Raw
	case data == nil:
		return nil
	case len(data) == len(e.Data) && (len(data) == 0 || &data[0] == &e.Data[0]):
		return e.Raw
	}
	return AppendEvent(nil, e.Name, data)
}
