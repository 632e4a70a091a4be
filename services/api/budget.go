package api

import (
	"fmt"
	"slices"
	"unicode"
	"unicode/utf8"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// The outputs of one step's calls go into the model's next prompt together, and stay in every
// prompt of the query after it. api.step-output-tokens bounds them, so that what the tools of
// one step return cannot push the question, the offered tools and the answer out of the
// model's context (the inference service fits the rest, leaving out earlier turns and tools,
// but never this turn's calls). The budget is split fairly: outputs smaller than an equal share
// stay whole, and what they leave is shared among the larger ones, each cut to its share with a
// note saying so. The query's record holds the outputs as the model was given them; a stream's
// tool_call_finished event, sent as each call ends, holds the output as the tool returned it.
// A direct @SERVER.TOOL query is not cut: no model reads it.
//
// Tokens are counted without the model's tokenizer (the api has none) as an upper bound
// (promptTokens), so the budget holds for any model the inference service runs.

// promptTokens bounds the tokens s takes in a model's prompt. Every token of the tokenizers
// llama.cpp runs (SentencePiece with byte fallback, byte-level BPE) covers at least one byte of
// text, so a text's bytes bound its tokens; and the Gorilla prompt quotes an output as a Python
// string literal, in which a character may take more bytes than it has: a newline, a tab, a
// quote or a backslash two (\n), a control character four (\x01), one that is not printable
// six or ten (\u2028, \U000e0001). Each character counts as the bytes it takes quoted.
func promptTokens(s string) int {
	n := 0
	for _, r := range s {
		n += quotedLen(r)
	}
	return n
}

// quotes are the bytes of the quotes around an output in the prompt.
const quotes = 2

// quotedLen is the most bytes r takes in a quoted string of the prompt.
func quotedLen(r rune) int {
	switch {
	case r == '\n' || r == '\r' || r == '\t' || r == '\'' || r == '"' || r == '\\':
		return 2
	case r < 0x20 || r == 0x7f:
		return 4
	case r < 0x80:
		return 1
	case unicode.IsPrint(r):
		return utf8.RuneLen(r) // an invalid byte is U+FFFD: 3 bytes
	case r <= 0xff:
		return 4
	case r <= 0xffff:
		return 6
	}
	return 10
}

// fitStep cuts the outputs of calls, one step's, to the step's budget together; it returns
// how many it cut.
func (r *runner) fitStep(calls []*toolmeshv1.ToolCallRecord) int {
	budget := r.h.cfg.StepOutputTokens
	if budget <= 0 {
		budget = DefaultStepOutputTokens
	}
	costs := make([]int, len(calls))
	total := 0
	for i, c := range calls {
		costs[i] = promptTokens(c.GetOutput()) + quotes
		total += costs[i]
	}
	if total <= budget {
		return 0
	}
	order := make([]int, len(calls))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return costs[a] - costs[b] })
	shares := make([]int, len(calls))
	left := budget
	for k, i := range order {
		shares[i] = min(costs[i], left/(len(calls)-k))
		left -= shares[i]
	}
	cut := 0
	for i, c := range calls {
		if costs[i] > shares[i] {
			c.Output = cutToTokens(c.GetOutput(), shares[i]-quotes, budget)
			cut++
		}
	}
	return cut
}

// cutToTokens cuts s so that it takes at most share tokens (promptTokens) with the note that
// ends it.
func cutToTokens(s string, share, budget int) string {
	note := func(kept int) string {
		return fmt.Sprintf("… [cut to this step's budget for tool output (api.step-output-tokens=%d): %d of %d bytes kept]", budget, kept, len(s))
	}
	room := share - promptTokens(note(len(s)))
	if room < 0 {
		// A share smaller than the note: a shorter one.
		note = func(int) string { return "…[cut]" }
		room = max(0, share-promptTokens(note(0)))
	}
	used, end := 0, 0
	for i, r := range s {
		if used += quotedLen(r); used > room {
			break
		}
		end = i + utf8.RuneLen(r)
		if r == utf8.RuneError {
			end = i + 1
		}
	}
	return s[:end] + note(end)
}
