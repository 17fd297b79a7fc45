// Package bpe counts the tokens of OpenAI's byte-level BPE encodings
// (o200k_base, cl100k_base) offline, from the two vocabularies it embeds
// (vocab/): the count OpenAI's own tiktoken gives, with no download at run
// time.
package bpe

import (
	"fmt"
	"strings"
	"sync"

	"github.com/pkoukk/tiktoken-go"
)

// The encodings an Encoding may be.
const (
	O200k  = "o200k_base"
	CL100k = "cl100k_base"
)

// Encoding counts the tokens of text. It is safe for concurrent use.
type Encoding struct {
	Name string
	enc  *tiktoken.Tiktoken
}

var (
	setLoader sync.Once
	mu        sync.Mutex
	loaded    = map[string]*Encoding{}
)

// Get returns the encoding named name, loading its vocabulary on first use
// (a few hundred milliseconds, and tens of megabytes kept for the
// process's life).
func Get(name string) (*Encoding, error) {
	if name != O200k && name != CL100k {
		return nil, fmt.Errorf("bpe: unknown encoding %q (want %s or %s)", name, O200k, CL100k)
	}
	setLoader.Do(func() { tiktoken.SetBpeLoader(vocabLoader{}) })
	mu.Lock()
	defer mu.Unlock()
	if e, ok := loaded[name]; ok {
		return e, nil
	}
	enc, err := tiktoken.GetEncoding(name)
	if err != nil {
		return nil, fmt.Errorf("bpe: load %s: %w", name, err)
	}
	e := &Encoding{Name: name, enc: enc}
	loaded[name] = e
	return e, nil
}

// Count returns the number of tokens of text, encoded as ordinary text:
// a special token's spelling in it ("<|endoftext|>") counts as the text
// it is, as the OpenAI API counts a prompt.
func (e *Encoding) Count(text []byte) int {
	return len(e.enc.EncodeOrdinary(string(text)))
}

// ForModel returns the encoding of an OpenAI model by its API name: O200k
// for the GPT-4o, GPT-4.1, GPT-4.5, GPT-5 and o-series families, CL100k
// for GPT-4 and GPT-3.5 Turbo and the text-embedding-3 and ada-002
// embeddings; "" for a name it does not know.
func ForModel(model string) string {
	for _, p := range []string{"gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o"} {
		if model == p || strings.HasPrefix(model, p+"-") {
			return O200k
		}
	}
	for _, p := range []string{"gpt-4", "gpt-3.5-turbo", "text-embedding-3-small", "text-embedding-3-large", "text-embedding-ada-002"} {
		if model == p || strings.HasPrefix(model, p+"-") {
			return CL100k
		}
	}
	return ""
}
