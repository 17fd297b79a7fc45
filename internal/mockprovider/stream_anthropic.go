package mockprovider

// messages streams an Anthropic message: message_start with the input usage, one text block
// (content_block_start, ping, content_block_delta..., content_block_stop), message_delta with
// the cumulative output usage, and message_stop.
func (st *streamer) messages() bool {
	c := st.c
	st.sse("message_start", func(b []byte) []byte {
		b = append(b, `{"type":"message_start","message":{"id":"msg_mock_`...)
		b = append(b, c.id...)
		b = append(b, `","type":"message","role":"assistant","model":"`...)
		b = append(b, c.model...)
		b = append(b, `","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":`...)
		b = appendInt(b, c.input)
		b = append(b, `,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":`...)
		b = appendInt(b, min(1, c.output()))
		return append(b, `,"service_tier":"standard"}}}`...)
	})
	st.sse("content_block_start", func(b []byte) []byte {
		return append(b, `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`...)
	})
	st.sse("ping", func(b []byte) []byte { return append(b, `{"type": "ping"}`...) })
	if !st.flush() {
		return false
	}
	ok := st.content(func(_, from, to int64) {
		st.sse("content_block_delta", func(b []byte) []byte {
			b = append(b, `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`...)
			b = appendTokens(b, from, to)
			return append(b, `"}}`...)
		})
	})
	if !ok {
		return false
	}
	st.sse("content_block_stop", func(b []byte) []byte {
		return append(b, `{"type":"content_block_stop","index":0}`...)
	})
	st.sse("message_delta", func(b []byte) []byte {
		b = append(b, `{"type":"message_delta","delta":{"stop_reason":"`...)
		b = append(b, stopReason(c)...)
		b = append(b, `","stop_sequence":null},"usage":{"output_tokens":`...)
		b = appendInt(b, c.output())
		return append(b, `}}`...)
	})
	st.sse("message_stop", func(b []byte) []byte { return append(b, `{"type":"message_stop"}`...) })
	return st.flush()
}

// sse appends one named event whose data body appends.
func (st *streamer) sse(name string, body func([]byte) []byte) {
	b := append(st.buf, "event: "...)
	b = append(b, name...)
	b = append(b, "\ndata: "...)
	b = body(b)
	st.buf = append(b, "\n\n"...)
}
