package llamatest

import (
	"strings"
	"unicode/utf8"
)

// Tokenize is how llama-server tokenizes text for the tiny model (TinyVocab): a space in
// front of the text and after each special token, every space as "▁", printable ASCII as
// itself, anything else as its UTF-8 bytes. With parseSpecial, "<s>", "</s>" and "<unk>" in
// the text are their special tokens; with addSpecial, BOS comes first. It matches the real
// server on the tiny model (checked by the real-server tests), so the double counts tokens as
// the server does.
func Tokenize(text string, addSpecial, parseSpecial bool) []int {
	var ids []int
	if addSpecial {
		ids = append(ids, TokenBOS)
	}
	prevSpecial := true
	for text != "" {
		frag := text
		special := -1
		if parseSpecial {
			if i, id, n := nextSpecial(text); i >= 0 {
				frag, special = text[:i], id
				text = text[i+n:]
			} else {
				text = ""
			}
		} else {
			text = ""
		}
		if frag != "" {
			if prevSpecial {
				ids = append(ids, tokenSpace)
			}
			ids = appendText(ids, frag)
			prevSpecial = false
		}
		if special >= 0 {
			ids = append(ids, special)
			prevSpecial = true
		}
	}
	return ids
}

// tokenSpace is "▁", the id after the byte tokens.
const tokenSpace = 3 + 256

func nextSpecial(s string) (at, id, n int) {
	at = -1
	for _, sp := range []struct {
		text string
		id   int
	}{{"<s>", TokenBOS}, {"</s>", TokenEOS}, {"<unk>", TokenUnknown}} {
		if i := strings.Index(s, sp.text); i >= 0 && (at < 0 || i < at) {
			at, id, n = i, sp.id, len(sp.text)
		}
	}
	return at, id, n
}

func appendText(ids []int, s string) []int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ':
			ids = append(ids, tokenSpace)
		case c >= '!' && c <= '~':
			ids = append(ids, tokenSpace+1+int(c-'!'))
		default:
			ids = append(ids, ByteToken(c))
		}
	}
	return ids
}

// Piece is the text of token id in TinyVocab as bytes ("▁" is a space, byte tokens their
// byte, special tokens their name).
func Piece(id int) []byte {
	switch {
	case id == TokenUnknown:
		return []byte("<unk>")
	case id == TokenBOS:
		return []byte("<s>")
	case id == TokenEOS:
		return []byte("</s>")
	case id >= 3 && id < tokenSpace:
		return []byte{byte(id - 3)}
	case id == tokenSpace:
		return []byte(" ")
	case id > tokenSpace && id <= tokenSpace+94:
		return []byte{byte('!' + id - tokenSpace - 1)}
	}
	return nil
}

// pieceJSON is a /tokenize piece as llama-server writes it: a string when the bytes are
// valid UTF-8, else the array of byte values.
func pieceJSON(id int) any {
	p := Piece(id)
	if utf8.Valid(p) {
		return string(p)
	}
	out := make([]int, len(p))
	for i, b := range p {
		out[i] = int(b)
	}
	return out
}
