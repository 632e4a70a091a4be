package gorilla

import (
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
	return c.ConversationPrompt(Conversation{}, query, history)
}

// ConversationPrompt is Prompt with a conversation's earlier turns (as conv's variant shows
// them) on lines of their own before the question's line (see the package documentation).
// With no turns and no instructions it is Prompt.
func (c *Catalog) ConversationPrompt(conv Conversation, query string, history []Step) string {
	b := make([]byte, 0, len(SystemPrompt)+len(c.functions)+len(query)+64)
	b = append(b, SystemPrompt...)
	b = append(b, "\n### Instruction: "...)
	if c.functions != "" {
		b = append(b, fnDelim...)
		b = append(b, c.functions...)
		b = append(b, '\n')
	}
	b = c.appendConversation(b, conv)
	if c.functions == "" {
		b = append(b, "<<question>> "...)
	} else {
		b = append(b, "<<question>>"...)
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
	b = c.appendCallOrName(b, s)
	if s.IsError {
		b = append(b, "\n<<error>>"...)
	} else {
		b = append(b, "\n<<output>>"...)
	}
	return appendPyString(b, cutText(s.Output, c.opts.MaxOutputBytes))
}
