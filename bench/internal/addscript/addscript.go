// Package addscript is the llama-server double's script the benchmarks share: the standard
// question "What is 2 plus 3?", answered at once — step 1 calls calculator.add, step 2 answers
// in text, and the compose request (the one without a grammar) words the answer from the last
// output in the prompt, so a right answer shows the output went through the loop and back.
package addscript

import (
	"strings"

	"github.com/toolmesh/toolmesh/internal/llamatest"
)

// Question is the standard question; Answer is what the script composes for it.
const (
	Question = "What is 2 plus 3?"
	Answer   = "2 plus 3 is 5."
)

// Reply is the double's script (llamatest.Double.ScriptFunc).
func Reply(req llamatest.Request) (llamatest.Reply, bool) {
	if !strings.Contains(req.Prompt, Question) {
		return llamatest.Reply{}, false
	}
	var text string
	switch {
	case req.Grammar == "":
		text = "2 plus 3 is " + lastOutput(req.Prompt) + "."
	case strings.Count(req.Prompt, "<<call>>") == 0:
		text = "<<function>>calculator.add(a=2, b=3)"
	default:
		text = "The sum is " + lastOutput(req.Prompt)
	}
	return llamatest.Reply{Pieces: pieces(text)}, true
}

// lastOutput reads the last <<output>> of a prompt, quotes removed.
func lastOutput(prompt string) string {
	i := strings.LastIndex(prompt, "<<output>>")
	if i < 0 {
		return ""
	}
	rest := prompt[i+len("<<output>>"):]
	if end := strings.IndexByte(rest, '\n'); end >= 0 {
		rest = rest[:end]
	}
	return strings.Trim(rest, `'"`)
}

// pieces cuts text into 8-byte stream events, the way a server streams a few tokens at a time.
func pieces(s string) []string {
	var out []string
	for len(s) > 8 {
		out = append(out, s[:8])
		s = s[8:]
	}
	return append(out, s)
}
