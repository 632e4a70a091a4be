package executor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"

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

// compileSchema compiles a tool's input schema once, at discovery.
func compileSchema(id string, raw json.RawMessage) (*jsonschema.Schema, error) {
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
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	loc := "urn:toolmesh:tool:" + url.PathEscape(id)
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("add input schema: %w", err)
	}
	sch, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("compile input schema: %w", err)
	}
	return sch, nil
}

var printer = message.NewPrinter(language.English)

// dropOptionalNulls removes top-level arguments that are null where the schema neither
// requires the property nor allows null for it: models write `verbose=None` for an optional
// argument they mean to leave out, and MCP clients omit such values (SEP-2243) rather than
// send a null the server's schema refuses.
func dropOptionalNulls(sch *jsonschema.Schema, args map[string]any) {
	for k, v := range args {
		if v != nil || slices.Contains(sch.Required, k) {
			continue
		}
		if p := sch.Properties[k]; p != nil && (p.Types == nil || slices.Contains(p.Types.ToStrings(), "null")) {
			continue
		}
		delete(args, k)
	}
}

// validateArgs checks args against the tool's compiled schema.
func validateArgs(toolID string, sch *jsonschema.Schema, args map[string]any) error {
	err := sch.Validate(args)
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
