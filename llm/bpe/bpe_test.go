package bpe

import (
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"
)

// TestCount_AsTiktoken: counts OpenAI's tiktoken gives for these texts
// (cl100k_base, as published with tiktoken-go).
func TestCount_AsTiktoken(t *testing.T) {
	enc, err := Get(CL100k)
	if err != nil {
		t.Fatal(err)
	}
	for text, want := range map[string]int{"hallo world!": 4, "你好世界！": 6, "こんにちは世界！": 5, "안녕하세요 세계!": 10, "Привет мир!": 6, "": 0} {
		if got := enc.Count([]byte(text)); got != want {
			t.Errorf("Count(%q) = %d, want %d", text, got, want)
		}
	}
	// A special token's spelling is ordinary text in a prompt.
	if got := enc.Count([]byte("<|endoftext|>")); got <= 1 {
		t.Errorf("<|endoftext|> counted as %d token(s), want its text's", got)
	}
	if _, err := Get("p50k_base"); err == nil {
		t.Error("Get(p50k_base) succeeded")
	}
}

func TestForModel(t *testing.T) {
	for model, want := range map[string]string{
		"gpt-4o": O200k, "gpt-4o-mini": O200k, "gpt-4.1-2025-04-14": O200k, "gpt-5-mini": O200k, "o3": O200k, "o4-mini": O200k,
		"gpt-4": CL100k, "gpt-4-turbo": CL100k, "gpt-3.5-turbo-0125": CL100k, "text-embedding-3-small": CL100k,
		"claude-sonnet-4": "", "llama-3": "", "o3x": "", "gpt-40": "",
	} {
		if got := ForModel(model); got != want {
			t.Errorf("ForModel(%q) = %q, want %q", model, got, want)
		}
	}
}

// corpus is the repository's documentation: English prose, tables, YAML,
// JSON and Go.
func corpus(t testing.TB) map[string][]byte {
	t.Helper()
	files, _ := filepath.Glob("../../docs/*.md")
	files = append(files, "../../README.md", "../../BENCHMARKS.md")
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = b
	}
	if len(out) < 5 {
		t.Fatalf("corpus of %d files", len(out))
	}
	return out
}

// TestCount_PiecesAreALowerBound measures on the corpus what the gateway's
// context-window check assumes (gateway.boundarySlack and its byte
// shortcut): a text never has more tokens than bytes, and counting two
// pieces of a text apart gives at most maxBoundaryGain tokens more than
// counting the text whole, wherever it is cut. It logs how far the
// admission estimate, bytes / 3, is above the real count.
func TestCount_PiecesAreALowerBound(t *testing.T) {
	const maxBoundaryGain = 8 // gateway.boundarySlack
	const window, stride = 256, 61
	for _, name := range []string{O200k, CL100k} {
		enc, err := Get(name)
		if err != nil {
			t.Fatal(err)
		}
		var bytes, tokens, cuts, worst int
		for file, text := range corpus(t) {
			n := enc.Count(text)
			if n > len(text) {
				t.Errorf("%s: %s has %d tokens in %d bytes", name, file, n, len(text))
			}
			bytes, tokens = bytes+len(text), tokens+n
			// Cut a window of the text at its middle, at every stride.
			for at := window; at+window <= len(text); at += stride {
				for !utf8.RuneStart(text[at]) {
					at++
				}
				a, b := text[at-window:at], text[at:min(at+window, len(text))]
				whole := enc.Count(text[at-window : at+len(b)])
				gain := enc.Count(a) + enc.Count(b) - whole
				worst = max(worst, gain)
				cuts++
				if gain > maxBoundaryGain {
					t.Errorf("%s: %s cut at byte %d: the pieces count %d tokens more than the whole", name, file, at, gain)
				}
			}
		}
		t.Logf("%s: %d bytes, %d tokens (%.2f bytes a token; bytes/3 is %.0f%% above); %d cuts, the pieces count at most %d more than the whole",
			name, bytes, tokens, float64(bytes)/float64(tokens), 100*(float64(bytes)/3/float64(tokens)-1), cuts, worst)
	}
}

// BenchmarkCount counts the corpus, all of it at once, in each encoding:
// the cost of checking a prompt longer than its window in bytes.
func BenchmarkCount(b *testing.B) {
	var text []byte
	for _, f := range corpus(b) {
		text = append(text, f...)
	}
	for _, name := range []string{O200k, CL100k} {
		enc, err := Get(name)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				enc.Count(text)
			}
		})
	}
}

// TestVocab_AsPublished: each embedded vocabulary, decompressed, is the
// file OpenAI publishes, by the hash tiktoken checks (vocab/README.md).
func TestVocab_AsPublished(t *testing.T) {
	for name, want := range map[string]string{
		CL100k: "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
		O200k:  "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
	} {
		f, err := vocabFiles.Open("vocab/" + name + ".tiktoken.gz")
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		if _, err := io.Copy(h, zr); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if got := hex.EncodeToString(h.Sum(nil)); got != want {
			t.Errorf("%s: SHA-256 %s, want %s", name, got, want)
		}
	}
}
