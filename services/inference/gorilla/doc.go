// Package gorilla speaks the Gorilla OpenFunctions v2 protocol: it turns toolmesh tools into the
// function list the model was trained on, builds the model's prompt byte for byte, generates a
// GBNF grammar that lets llama-server decode only well-formed calls to the offered tools (or a
// plain answer), and parses what the model wrote back into tool calls with JSON-typed arguments.
//
// It is pure Go and does no I/O. The flow for one model step is
//
//	cat, err := gorilla.Build(tools)             // names, function JSON, grammar
//	prompt := cat.Prompt(query, history)        // send as "prompt" to /completion
//	grammar := cat.Grammar()                    // send as "grammar"
//	calls, answer, err := cat.Parse(content)    // the generated text
//
// # Names
//
// A tool id is "SERVER.TOOL". The model sees it as a dotted Python name: every dot-separated
// segment is made a Python identifier (characters outside [A-Za-z0-9_] become "_", a leading
// digit or an empty segment gets a "_" prefix, a Python keyword gets a "_" suffix). An id that
// is already such a name keeps it; when other ids map to a taken name they get "_2", "_3", ...
// in sorted id order, so "a.b_c" stays "a.b_c" and "a.b-c" becomes "a.b_c_2". Parse maps names
// back to the exact id. Argument names that are not Python identifiers (or are keywords) are
// mapped the same way within one tool: "class" is shown as "class_", "user-id" as "user_id".
//
// # Function JSON and argument order
//
// The function list is rendered like Python's json.dumps with default settings (", " and ": "
// separators, ASCII-only output with \uXXXX escapes). A schema held in a protobuf Struct has lost
// its key order, so the order is fixed here: function objects are {"name", "description",
// "parameters"}; schema keys come as "type", "description", "enum", "const", "items",
// "properties", "required", "default", then the rest sorted; the properties of an object come
// required ones first (in the order of "required"), then the optional ones sorted by name.
// That property order is "schema order": positional arguments are mapped by it, Render writes
// keyword arguments in it, and the grammar asks for keyword arguments in it.
//
// # History
//
// The reference prompt has no place for earlier steps. Earlier calls and their outputs are
// appended after the question, one line each, before "### Response: ":
//
//	<<question>>What is 2+3, doubled?
//	<<call>>calculator.add(a=2, b=3)
//	<<output>>'5'
//	### Response:
//
// The call is written as the model would write it (without the <<function>> marker, so the
// model does not copy it into its answer); the output is a Python string literal, so newlines and
// template markers inside it cannot break the prompt's structure; a failed call's output is
// introduced by <<error>> instead of <<output>>. Outputs longer than Options.MaxOutputBytes are
// cut at a UTF-8 boundary and marked.
//
// # Conversations
//
// Nor has the reference a place for a conversation's earlier turns. They go on lines of their
// own between the function list (or "### Instruction: " when there is none) and the question's
// line, which stays as the reference writes it, so the question is found on the line that
// starts with "<<question>>" (the earlier lines' string literals may hold the marker, never at
// a line's start):
//
//	### Instruction: <<function>>[...]
//	<<system>>'Answer in one line.'
//	<<user>>'What is the weather in Paris?'
//	<<call>>get_weather(city='Paris')
//	<<output>>'{"temp": 21}'
//	<<assistant>>'21 °C in Paris.'
//	<<question>>And in Nice?
//	### Response:
//
// The caller's leading system and developer messages are its instructions, <<system>> lines
// shown whole. A turn starts at a user message (<<user>>); an assistant's words are an
// <<assistant>> line, its calls of the caller's functions <<call>> lines written as the model
// would write them, each followed by the <<output>> line of the tool message that answered it;
// a system message inside a turn is a <<system>> line of that turn. Every text is a Python
// string literal, as outputs are; outputs are cut at Options.MaxOutputBytes as this turn's are.
//
// When the prompt is too long for the context, Conversation.Variant shows fewer words: first
// the oldest turns are summarized, oldest first (each text cut to SummaryBytes, calls kept,
// outputs left out), then the oldest are left out; the instructions always stay. Each variant
// is no longer than the one before, so the service finds the first that fits by bisection.
//
// # Grammar
//
// The grammar (llama.cpp GBNF) accepts either a plain answer — any text that does not contain
// "<<" — or calls written back to back, each "<<function>>NAME(arg=value, ...)" naming an
// offered tool, keyword arguments only, in schema order, required ones present, separated by
// "," and an optional space. Values follow the argument's schema as Python literals: strings in
// either quote kind with escapes, integers, floats, True/False, None where null is allowed,
// lists, dicts with the declared keys, enum and const values as literals. Every repetition is
// bounded (string bytes, list items, dict entries, nesting depth, digits, calls), so the
// grammar's language is finite and a sampler cannot run on forever inside a value.
//
// With Options.MaxBytes (the service sets it from max_tokens) the longest sentence of the
// grammar is at most MaxBytes bytes, so a response always ends before n_predict cuts it off:
// the plain answer is bounded, and the calls are sized by a budget shared out in MaxCalls
// units among classes of calls (one long call, many short ones, or a mix), each tool's limits
// in each class chosen to refuse as few real calls as possible (budget.go explains how). One
// text argument per call may be longer than the other strings. Tools no call of which fits
// are left out of the grammar (Catalog.Uncallable).
//
// # Parsing
//
// Parse follows the reference's split("<<function>>")[1:] reading of generated text, but scans
// the calls instead of splitting, so a string argument may itself contain "<<function>>". It
// reads Python call syntax: dotted names, keyword and positional arguments (positional ones map
// by schema order), and Python literals (both quote kinds, prefixes r/u/b, triple quotes, escapes,
// True/False/None, ints in any base, floats, nested lists, tuples (as lists), sets (as lists) and
// dicts). A bare name or a nested call becomes a string holding its source text, as the BFCL
// decoder does. Values come back as string, bool, nil, int64, float64 (floats and integers that
// do not fit int64), []any and map[string]any. Text with no "<<function>>" is an answer. Errors
// are *SyntaxError values naming the byte offset in the output.
package gorilla
