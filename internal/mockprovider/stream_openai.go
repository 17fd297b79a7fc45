package mockprovider

// chat streams a chat completion: a role chunk per choice, content chunks, a finish chunk per
// choice, the usage chunk when the client asked for it, and [DONE].
func (st *streamer) chat() bool {
	c := st.c
	for i := range c.n {
		st.chatChunk(i, `{"role":"assistant","content":"","refusal":null}`, 0, 0, "null")
	}
	if !st.flush() {
		return false
	}
	if !st.content(func(i, from, to int64) { st.chatChunk(i, `{"content":"`, from, to, "null") }) {
		return false
	}
	finish := `"` + chatFinish(c) + `"`
	for i := range c.n {
		st.chatChunk(i, `{}`, 0, 0, finish)
	}
	if c.includeUsage {
		st.chatHead()
		st.buf = append(st.buf, `"choices":[],"usage":`...)
		st.buf = appendChatUsage(st.buf, c)
		st.buf = append(st.buf, "}\n\n"...)
	}
	st.buf = append(st.buf, "data: [DONE]\n\n"...)
	return st.flush()
}

func (st *streamer) chatHead() {
	c := st.c
	b := append(st.buf, `data: {"id":"chatcmpl-mock-`...)
	b = append(b, c.id...)
	b = append(b, `","object":"chat.completion.chunk","created":`...)
	b = appendInt(b, c.created)
	b = append(b, `,"model":"`...)
	b = append(b, c.model...)
	st.buf = append(b, `","system_fingerprint":"fp_mock",`...)
}

// chatChunk appends one chunk for choice i. A delta that opens a content string (ends in a
// quote) gets tokens [from, to) and its closing.
func (st *streamer) chatChunk(i int64, delta string, from, to int64, finish string) {
	st.chatHead()
	b := append(st.buf, `"choices":[{"index":`...)
	b = appendInt(b, i)
	b = append(b, `,"delta":`...)
	b = append(b, delta...)
	if delta[len(delta)-1] == '"' {
		b = appendTokens(b, from, to)
		b = append(b, `"}`...)
	}
	b = append(b, `,"logprobs":null,"finish_reason":`...)
	b = append(b, finish...)
	b = append(b, "}]"...)
	if st.c.includeUsage {
		b = append(b, `,"usage":null`...)
	}
	st.buf = append(b, "}\n\n"...)
}

// responses streams a Responses API answer with its semantic events, ending in
// response.completed, or response.incomplete when the output stopped at max_output_tokens.
func (st *streamer) responses() bool {
	c := st.c
	st.event("response.created", func(b []byte) []byte {
		b = append(b, `"response":`...)
		return appendResponse(b, c, false)
	})
	st.event("response.in_progress", func(b []byte) []byte {
		b = append(b, `"response":`...)
		return appendResponse(b, c, false)
	})
	st.event("response.output_item.added", func(b []byte) []byte {
		b = append(b, `"output_index":0,"item":`...)
		return appendOutputItem(b, c, false)
	})
	st.event("response.content_part.added", func(b []byte) []byte {
		b = st.itemRef(b)
		return append(b, `,"part":{"type":"output_text","text":"","annotations":[],"logprobs":[]}`...)
	})
	if !st.flush() {
		return false
	}
	ok := st.content(func(_, from, to int64) {
		st.event("response.output_text.delta", func(b []byte) []byte {
			b = st.itemRef(b)
			b = append(b, `,"delta":"`...)
			b = appendTokens(b, from, to)
			return append(b, `","logprobs":[]`...)
		})
	})
	if !ok {
		return false
	}
	st.event("response.output_text.done", func(b []byte) []byte {
		b = st.itemRef(b)
		b = append(b, `,"text":"`...)
		b = appendTokens(b, 0, c.perChoice)
		return append(b, `","logprobs":[]`...)
	})
	st.event("response.content_part.done", func(b []byte) []byte {
		b = st.itemRef(b)
		b = append(b, `,"part":`...)
		return appendTextPart(b, c)
	})
	st.event("response.output_item.done", func(b []byte) []byte {
		b = append(b, `"output_index":0,"item":`...)
		return appendOutputItem(b, c, true)
	})
	terminal := "response.completed"
	if c.hitCap() {
		terminal = "response.incomplete"
	}
	st.event(terminal, func(b []byte) []byte {
		b = append(b, `"response":`...)
		return appendResponse(b, c, true)
	})
	return st.flush()
}

// event appends one Responses event: its name, and data holding its type, sequence number and
// what body appends.
func (st *streamer) event(name string, body func([]byte) []byte) {
	b := append(st.buf, "event: "...)
	b = append(b, name...)
	b = append(b, "\ndata: {\"type\":\""...)
	b = append(b, name...)
	b = append(b, `","sequence_number":`...)
	b = appendInt(b, st.seq)
	st.seq++
	b = append(b, ',')
	b = body(b)
	st.buf = append(b, "}\n\n"...)
}

func (st *streamer) itemRef(b []byte) []byte {
	b = append(b, `"item_id":"msg_mock_`...)
	b = append(b, st.c.id...)
	return append(b, `","output_index":0,"content_index":0`...)
}
