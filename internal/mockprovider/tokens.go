package mockprovider

import "strconv"

// words are the tokens of every answer, in order, cycling: plain ASCII, so they need no JSON
// escaping.
var words = [...]string{
	" lorem", " ipsum", " dolor", " sit", " amet", " consectetur", " adipiscing", " elit",
	" sed", " do", " eiusmod", " tempor", " incididunt", " ut", " labore", " et",
	" dolore", " magna", " aliqua", " enim", " ad", " minim", " veniam", " quis",
	" nostrud", " exercitation", " ullamco", " laboris", " nisi", " aliquip", " ex", " ea",
}

// cycleText is the text of one full cycle of words, and cycleOffsets[i] where word i starts in
// it (cycleOffsets[len(words)] is its length).
var cycleText, cycleOffsets = func() (string, [len(words) + 1]int) {
	var text string
	var offs [len(words) + 1]int
	for i, w := range words {
		offs[i] = len(text)
		text += w
	}
	offs[len(words)] = len(text)
	return text, offs
}()

// appendTokens appends the text of tokens [from, to) to dst.
func appendTokens(dst []byte, from, to int64) []byte {
	const n = int64(len(words))
	for from < to {
		i := from % n
		last := min(n, i+to-from)
		dst = append(dst, cycleText[cycleOffsets[i]:cycleOffsets[last]]...)
		from += last - i
	}
	return dst
}

// appendInt appends the decimal form of n.
func appendInt(dst []byte, n int64) []byte { return strconv.AppendInt(dst, n, 10) }
