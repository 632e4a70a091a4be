package inference

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/codes"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/services/inference/gorilla"
)

// promptParts are what a Gorilla prompt is made of, before it is fitted to the context.
type promptParts struct {
	query   string
	history []gorilla.Step
	conv    gorilla.Conversation
	// functions are the caller's, never left out; tools the mesh's, best first, the
	// lowest-ranked left out when nothing else is left to shorten.
	functions, tools []*toolmeshv1.Tool
	// floor is the fewest tokens the answer must have room for.
	floor int
}

// fitted is the prompt that fits.
type fitted struct {
	prompt  string
	tokens  int // the prompt's, without BOS
	offered []*toolmeshv1.Tool
	dropped []string // tool ids left out, lowest-ranked first
	conv    gorilla.Conversation
}

// history says how the earlier turns fit.
func (f *fitted) history() *toolmeshv1.HistoryFit {
	return &toolmeshv1.HistoryFit{Turns: int32(f.conv.Turns()), Summarized: int32(f.conv.Summarized()), Dropped: int32(f.conv.Dropped())}
}

// fit finds the longest prompt that leaves floor tokens of the context for the answer. The
// ways to shorten it form one sequence, each no longer than the one before: the conversation's
// variants (its oldest turns summarized, then dropped), then, with every turn dropped, the
// lowest-ranked tools left out one by one. The whole prompt is tried first (most fit), then the
// first that fits is found by bisection, so a long conversation costs a few /tokenize calls,
// not one per turn. Nothing fitting is RESOURCE_EXHAUSTED with errreason.ContextTooLong.
func (s *Service) fit(ctx context.Context, p promptParts, nCtx int) (*fitted, error) {
	convLast := p.conv.Variants() - 1
	tried := map[int]*fitted{}
	try := func(k int) (bool, error) {
		f := &fitted{conv: p.conv.Variant(k)}
		keep := len(p.tools) - max(0, k-convLast)
		for i := len(p.tools) - 1; i >= keep; i-- {
			f.dropped = append(f.dropped, p.tools[i].GetId())
		}
		f.offered = append(append(make([]*toolmeshv1.Tool, 0, len(p.functions)+keep), p.functions...), p.tools[:keep]...)
		// The prompt does not depend on the grammar's limits: the grammar is sized afterwards.
		cat, err := s.catalogs.build(f.offered, 0, false)
		if err != nil {
			return false, errreason.InvalidField("tools", err.Error())
		}
		f.prompt = cat.ConversationPrompt(f.conv, p.query, p.history)
		if f.tokens, err = s.llm.CountTokens(ctx, f.prompt); err != nil {
			return false, llmStatus(err)
		}
		tried[k] = f
		// +1: llama-server puts BOS in front of a string prompt.
		return f.tokens+1+p.floor <= nCtx, nil
	}
	last := convLast + len(p.tools)
	k, ok, err := firstFit(last, try)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errreason.Error(codes.ResourceExhausted, errreason.ContextTooLong, fmt.Sprintf(
			"the question, this turn's calls, the caller's functions and instructions take %d tokens with every earlier turn and tool left out; with %d more for the answer that exceeds the model's context of %d",
			tried[last].tokens+1, p.floor, nCtx))
	}
	return tried[k], nil
}

// firstFit is the least k in [0, last] for which fits is true, fits being false up to some k
// and true from there on. It tries 0 first, since most prompts fit whole, then bisects; ok is
// false when none fits.
func firstFit(last int, fits func(k int) (bool, error)) (k int, ok bool, err error) {
	if ok, err := fits(0); ok || err != nil {
		return 0, ok, err
	}
	lo, hi := 0, last+1 // fits(lo) is false; fits(hi) is true, or hi is past the end
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := fits(mid)
		if err != nil {
			return 0, false, err
		}
		if ok {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, hi <= last, nil
}

// cutAtStop is answer up to the first of the stop strings, and whether one was found.
func cutAtStop(answer string, stop []string) (string, bool) {
	at := -1
	for _, s := range stop {
		if i := strings.Index(answer, s); s != "" && i >= 0 && (at < 0 || i < at) {
			at = i
		}
	}
	if at < 0 {
		return answer, false
	}
	return answer[:at], true
}

// cutTokens is answer cut to its first n tokens, as the model's tokenizer reads it, and
// whether it was longer.
func (s *Service) cutTokens(ctx context.Context, answer string, n int) (string, bool, error) {
	toks, err := s.llm.TokenizePieces(ctx, answer)
	if err != nil {
		return "", false, err
	}
	var joined strings.Builder
	for _, t := range toks {
		joined.Write(t.Piece)
	}
	// A SentencePiece tokenizer puts a space in front of a text it tokenizes on its own; in the
	// model's output that space was not there, so it is not a token of the answer.
	if len(toks) > 0 && joined.String() == " "+answer {
		toks[0].Piece = toks[0].Piece[1:]
		if len(toks[0].Piece) == 0 {
			toks = toks[1:]
		}
	}
	if len(toks) <= n {
		return answer, false, nil
	}
	var b []byte
	for _, t := range toks[:n] {
		b = append(b, t.Piece...)
	}
	// The n-th token may end inside a character (byte tokens): keep whole characters only.
	for len(b) > 0 && !utf8.Valid(b) {
		b = b[:len(b)-1]
	}
	return string(b), true, nil
}
