package bpe

import (
	"bufio"
	"compress/gzip"
	"embed"
	"encoding/base64"
	"fmt"
	"path"
	"strconv"
	"strings"
)

// The two vocabularies Get serves, OpenAI's published .tiktoken files
// gzipped (vocab/README.md says where they come from). They are embedded
// here rather than through github.com/pkoukk/tiktoken-go-loader, whose
// assets package embeds p50k_base and r50k_base too (1.7 MB that no model
// of ForModel uses), and gzipped, which keeps 4.5 MB out of the binary.
//
//go:embed vocab/*.tiktoken.gz
var vocabFiles embed.FS

// vocabLoader is tiktoken-go's BpeLoader over vocabFiles: it is asked for
// a vocabulary by its download URL and answers from the embedded file of
// the same name.
type vocabLoader struct{}

// LoadTiktokenBpe returns the ranks of the vocabulary named by file's base
// name: each line of a .tiktoken file is a base64 token and its rank.
func (vocabLoader) LoadTiktokenBpe(file string) (map[string]int, error) {
	f, err := vocabFiles.Open("vocab/" + path.Base(file) + ".gz")
	if err != nil {
		return nil, fmt.Errorf("bpe: no embedded vocabulary %s: %w", path.Base(file), err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("bpe: %s: %w", path.Base(file), err)
	}
	ranks := make(map[string]int, 200_000)
	lines := bufio.NewScanner(zr)
	for lines.Scan() {
		token, rank, ok := strings.Cut(lines.Text(), " ")
		if !ok {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(token)
		if err != nil {
			return nil, fmt.Errorf("bpe: %s: token %q: %w", path.Base(file), token, err)
		}
		r, err := strconv.Atoi(rank)
		if err != nil {
			return nil, fmt.Errorf("bpe: %s: rank %q: %w", path.Base(file), rank, err)
		}
		ranks[string(b)] = r
	}
	if err := lines.Err(); err != nil {
		return nil, fmt.Errorf("bpe: %s: %w", path.Base(file), err)
	}
	return ranks, nil
}
