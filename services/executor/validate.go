package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// noLoader refuses every external reference: a server's schema must not make
// the executor read local files or fetch URLs. Schemas with such $refs do not
// compile and their tools are called unvalidated.
type noLoader struct{}

func (noLoader) Load(u string) (any, error) {
	return nil, fmt.Errorf("external schema reference %q not allowed", u)
}

// schemaLimits bound a tool's input schema (at listing) and the validation of
// one call's arguments against it; Config.schemaLimits fills them from the
// executor.schema-* flags.
type schemaLimits struct {
	maxBytes    int           // the schema as listed
	maxDepth    int           // nesting of its objects and arrays
	maxPerValue int64         // worst-case subschema evaluations at one argument value (schemacost.go)
	maxSteps    int64         // subschema evaluations of one call's validation
	maxTime     time.Duration // one call's validation
}

// argSchema is a tool's compiled input schema and what bounds validating
// against it.
type argSchema struct {
	sch  *jsonschema.Schema
	cost schemaCost
	lim  schemaLimits
	// steps counts the subschema evaluations of the validation in progress
	// (the compiled schema calls it); turn lets one validation at a time use
	// it. Validating takes microseconds, so calls to one tool barely wait.
	steps *stepCounter
	turn  chan struct{}
}

// compileSchema compiles a tool's input schema once, at discovery, and
// measures it (schemacost.go); refuse decides whether the tool may be called.
func compileSchema(id string, raw json.RawMessage, lim schemaLimits) (*argSchema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("decode input schema: %w", err)
	}
	if m, ok := doc.(map[string]any); ok {
		// Some SDKs emit "properties": null or "required": null for tools
		// without parameters; treat them as absent rather than as broken.
		for _, k := range []string{"properties", "required", "$defs", "definitions"} {
			if v, ok := m[k]; ok && v == nil {
				delete(m, k)
			}
		}
	}
	a := &argSchema{lim: lim, steps: &stepCounter{}, turn: make(chan struct{}, 1)}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	// Every subschema gets the step counter: the validator calls it each time
	// it evaluates one (AssertVocabs makes it apply to every draft).
	c.RegisterVocabulary(&jsonschema.Vocabulary{
		URL: "urn:toolmesh:vocab:steps",
		Compile: func(*jsonschema.CompilerContext, map[string]any) (jsonschema.SchemaExt, error) {
			return a.steps, nil
		},
	})
	c.AssertVocabs()
	loc := "urn:toolmesh:tool:" + url.PathEscape(id)
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("add input schema: %w", err)
	}
	if a.sch, err = c.Compile(loc); err != nil {
		return nil, fmt.Errorf("compile input schema: %w", err)
	}
	a.cost, err = measureSchema(a.sch)
	if err != nil {
		return a, &refusedError{reason: "input schema: " + err.Error()}
	}
	if a.cost.perValue > lim.maxPerValue {
		return a, &refusedError{reason: fmt.Sprintf("input schema: validating one value may take %s subschema evaluations, over the limit of %d (executor.schema-max-evaluations)",
			countString(a.cost.perValue), lim.maxPerValue)}
	}
	return a, nil
}

// checkSchemaText refuses an input schema by its text alone, before it is
// decoded: larger or deeper than the limits.
func checkSchemaText(raw json.RawMessage, lim schemaLimits) error {
	if len(raw) > lim.maxBytes {
		return &refusedError{reason: fmt.Sprintf("input schema is %d bytes, over the limit of %d (executor.schema-max-bytes)", len(raw), lim.maxBytes)}
	}
	if d := jsonDepth(raw); d > lim.maxDepth {
		return &refusedError{reason: fmt.Sprintf("input schema nests %d levels deep, over the limit of %d (executor.schema-max-depth)", d, lim.maxDepth)}
	}
	return nil
}

// jsonDepth is the deepest nesting of objects and arrays in a JSON text.
func jsonDepth(b []byte) int {
	depth, deepest := 0, 0
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}

// countString writes a saturated count as "more than N".
func countString(n int64) string {
	if n >= costCap {
		return fmt.Sprintf("more than %d", costCap)
	}
	return strconv.FormatInt(n, 10)
}

// stepCounter is the validation budget: the validator calls Validate for
// every subschema it evaluates, and a validation over its steps or past its
// deadline stops there (validateArgs recovers the panic). The validator calls
// it after the subschema's own work, and not at all for one that fails inside
// "not" or "if"; so it catches what the measure (schemacost.go) missed in
// most schemas, not all, and the measure remains the first bound.
type stepCounter struct {
	n, max   int64
	deadline time.Time
}

// budgetSpent is the panic value that stops a validation.
type budgetSpent struct{ steps int64 }

func (c *stepCounter) Validate(*jsonschema.ValidatorContext, any) {
	c.n++
	if c.n > c.max || (c.n%64 == 0 && time.Now().After(c.deadline)) {
		panic(budgetSpent{steps: c.n})
	}
}

var printer = message.NewPrinter(language.English)

// dropOptionalNulls removes top-level arguments that are null where the schema neither
// requires the property nor allows null for it: models write `verbose=None` for an optional
// argument they mean to leave out, and MCP clients omit such values (SEP-2243) rather than
// send a null the server's schema refuses.
func dropOptionalNulls(a *argSchema, args map[string]any) (dropped bool) {
	sch := a.sch
	for k, v := range args {
		if v != nil || slices.Contains(sch.Required, k) {
			continue
		}
		if p := sch.Properties[k]; p != nil && (p.Types == nil || slices.Contains(p.Types.ToStrings(), "null")) {
			continue
		}
		delete(args, k)
		dropped = true
	}
	return dropped
}

// validateArgs checks args against the tool's compiled schema, within the
// budget: first by the measure (values in the arguments × the schema's
// worst case per value), then by the step counter as it runs.
func validateArgs(ctx context.Context, toolID string, a *argSchema, args map[string]any) error {
	values := countValues(args)
	if worst := mulCap(values, a.cost.perValue); worst > a.lim.maxSteps {
		return overBudget(toolID, fmt.Sprintf("validating these arguments (%d values) against the tool's input schema may take %s subschema evaluations, over the budget of %d (executor.schema-validation-steps)",
			values, countString(worst), a.lim.maxSteps))
	}
	select {
	case a.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-a.turn }()
	start := time.Now()
	spent, err := a.run(args, start.Add(a.lim.maxTime))
	if spent != nil {
		if spent.steps > a.lim.maxSteps {
			return overBudget(toolID, fmt.Sprintf("validation stopped after %d subschema evaluations, the budget (executor.schema-validation-steps)", a.lim.maxSteps))
		}
		return overBudget(toolID, fmt.Sprintf("validation stopped after %s, the budget (executor.schema-validation-timeout)", time.Since(start).Round(time.Millisecond)))
	}
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &ValidationError{Tool: toolID, Violations: []FieldViolation{{Field: "arguments", Description: err.Error()}}}
	}
	var out []FieldViolation
	collectViolations(ve, &out)
	if len(out) == 0 {
		out = append(out, FieldViolation{Field: fieldPath(ve.InstanceLocation), Description: ve.ErrorKind.LocalizedString(printer)})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Field != out[j].Field {
			return out[i].Field < out[j].Field
		}
		return out[i].Description < out[j].Description
	})
	return &ValidationError{Tool: toolID, Violations: dedupe(out)}
}

// run validates with the step counter armed; a.turn must be held.
func (a *argSchema) run(args map[string]any, deadline time.Time) (spent *budgetSpent, err error) {
	a.steps.n, a.steps.max, a.steps.deadline = 0, a.lim.maxSteps, deadline
	defer func() {
		if r := recover(); r != nil {
			b, ok := r.(budgetSpent)
			if !ok {
				panic(r)
			}
			spent = &b
		}
	}()
	return nil, a.sch.Validate(args)
}

func overBudget(toolID, why string) error {
	return &ValidationError{Tool: toolID, Violations: []FieldViolation{{Field: "arguments", Description: why}}}
}

// countValues counts the JSON values in args, args itself included.
func countValues(v any) int64 {
	n := int64(1)
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			n += countValues(e)
		}
	case []any:
		for _, e := range v {
			n += countValues(e)
		}
	}
	return n
}

func mulCap(a, b int64) int64 {
	if a != 0 && b > costCap/a {
		return costCap
	}
	return a * b
}

func collectViolations(ve *jsonschema.ValidationError, out *[]FieldViolation) {
	switch k := ve.ErrorKind.(type) {
	case *kind.AnyOf, *kind.OneOf:
		// The branches' own failures would only confuse; report the combinator.
		*out = append(*out, FieldViolation{Field: fieldPath(ve.InstanceLocation), Description: k.LocalizedString(printer)})
		return
	}
	if len(ve.Causes) > 0 {
		for _, c := range ve.Causes {
			collectViolations(c, out)
		}
		return
	}
	field := fieldPath(ve.InstanceLocation)
	switch k := ve.ErrorKind.(type) {
	case *kind.Type:
		*out = append(*out, FieldViolation{Field: field, Description: fmt.Sprintf("got %s, want %s", k.Got, strings.Join(k.Want, " or "))})
	case *kind.Required:
		for _, m := range k.Missing {
			*out = append(*out, FieldViolation{Field: field, Description: fmt.Sprintf("missing property %q", m)})
		}
	case *kind.AdditionalProperties:
		for _, p := range k.Properties {
			*out = append(*out, FieldViolation{Field: field, Description: fmt.Sprintf("unexpected property %q", p)})
		}
	case *kind.FalseSchema:
		*out = append(*out, FieldViolation{Field: field, Description: "not allowed"})
	default:
		*out = append(*out, FieldViolation{Field: field, Description: ve.ErrorKind.LocalizedString(printer)})
	}
}

// fieldPath renders an instance location as arguments.a.b[0].
func fieldPath(loc []string) string {
	var b strings.Builder
	b.WriteString("arguments")
	for _, p := range loc {
		if _, err := strconv.Atoi(p); err == nil {
			b.WriteString("[" + p + "]")
			continue
		}
		b.WriteString("." + p)
	}
	return b.String()
}

func dedupe(in []FieldViolation) []FieldViolation {
	out := in[:0]
	for i, v := range in {
		if i > 0 && v == in[i-1] {
			continue
		}
		out = append(out, v)
	}
	return out
}
