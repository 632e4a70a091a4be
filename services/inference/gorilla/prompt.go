package gorilla

import (
	"strconv"
	"unicode/utf8"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// SystemPrompt is the system text of Gorilla OpenFunctions v2's reference prompt.
const SystemPrompt = "You are an AI programming assistant, utilizing the Gorilla LLM model, developed by Gorilla LLM, and you only answer questions related to computer science. For politically sensitive questions, security and privacy issues, and other non-computer science questions, you will refuse to answer."

// fnDelim opens every call in the model's output.
const fnDelim = "<<function>>"

// Step is one earlier call of the same query and what it returned.
type Step struct {
	ToolID    string
	Arguments map[string]any
	Output    string
	IsError   bool
}

// StepsFromRecords turns the history of a GenerateRequest into steps.
func StepsFromRecords(records []*toolmeshv1.ToolCallRecord) []Step {
	steps := make([]Step, 0, len(records))
	for _, r := range records {
		if r == nil {
			continue
		}
		var args map[string]any
		if r.GetArguments() != nil {
			args = r.GetArguments().AsMap()
		}
		steps = append(steps, Step{ToolID: r.GetTool(), Arguments: args, Output: r.GetOutput(), IsError: r.GetIsError()})
	}
	return steps
}

// Prompt is the model's prompt for query: byte for byte the reference template
//
//	{system}\n### Instruction: <<function>>{functions}\n<<question>>{query}\n### Response:
//
// (ending in a space after "Response:"), or, with no tools,
// {system}\n### Instruction: <<question>> {query}\n### Response: (the same ending);
// earlier steps go between the query and "\n### Response: " (see the package documentation).
func (c *Catalog) Prompt(query string, history []Step) string {
	b := make([]byte, 0, len(SystemPrompt)+len(c.functions)+len(query)+64)
	b = append(b, SystemPrompt...)
	b = append(b, "\n### Instruction: "...)
	if c.functions == "" {
		b = append(b, "<<question>> "...)
	} else {
		b = append(b, fnDelim...)
		b = append(b, c.functions...)
		b = append(b, "\n<<question>>"...)
	}
	b = append(b, query...)
	for _, s := range history {
		b = c.appendStep(b, s)
	}
	b = append(b, "\n### Response: "...)
	return string(b)
}

// appendStep writes "\n<<call>>name(args)\n<<output>>'...'" (or <<error>>).
func (c *Catalog) appendStep(b []byte, s Step) []byte {
	b = append(b, "\n<<call>>"...)
	start := len(b)
	nb, err := c.appendCall(b, s.ToolID, s.Arguments)
	if err != nil {
		// A value with no Python literal (NaN, say): show the call without its arguments.
		nb = append(append(b[:start], dottedName(s.ToolID)...), "(...)"...)
		if f := c.byID[s.ToolID]; f != nil {
			nb = append(append(b[:start], f.name...), "(...)"...)
		}
	}
	b = nb
	if s.IsError {
		b = append(b, "\n<<error>>"...)
	} else {
		b = append(b, "\n<<output>>"...)
	}
	out := s.Output
	if max := c.opts.MaxOutputBytes; max > 0 && len(out) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(out[cut]) {
			cut--
		}
		out = out[:cut] + "…[" + strconv.Itoa(len(s.Output)-cut) + " more bytes]"
	}
	return appendPyString(b, out)
}
