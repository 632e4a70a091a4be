// Command extract writes schemas.json, the OpenAI response schemas the OpenAI face's tests
// validate against, from OpenAI's published OpenAPI document (openapi.yaml of the
// openai/openai-openapi repository; README.md beside schemas.json names the commit):
//
//	go run ./services/api/openaiface/testdata/openai/extract openapi.yaml \
//	  > services/api/openaiface/testdata/openai/schemas.json
//
// It keeps the schemas named in roots and every schema they reference, transitively, as one
// JSON Schema 2020-12 document with the components under $defs, and translates what is
// OpenAPI's own into JSON Schema:
//
//   - nullable: true        → {"anyOf": [the schema without nullable, {"type": "null"}]}
//     (the form OpenAI's newer schemas use themselves; nullable: false is dropped)
//   - example: V            → examples: [V]
//   - discriminator         → dropped: an annotation; the oneOf it sits on decides alone
//   - x-* extensions        → dropped (x-oaiMeta, x-oaiTypeLabel, x-stainless-const, ...)
//   - $ref to #/components/schemas/X → #/$defs/X
//
// Any other keyword it does not know fails the run, so a new OpenAPI construct is never
// copied unread. Keys keep the document's order ($defs are sorted by name), so the output
// is a pure function of the input: the same spec gives the same bytes.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// roots are the schemas the tests validate against by name.
var roots = []string{
	"CreateChatCompletionResponse",
	"CreateChatCompletionStreamResponse",
	"ListModelsResponse",
	"Model",
	"ErrorResponse",
	"Error",
}

const refPrefix = "#/components/schemas/"

// object is a JSON object that keeps its keys' order.
type object struct {
	keys []string
	vals map[string]any
}

func newObject() *object { return &object{vals: map[string]any{}} }

func (o *object) set(k string, v any) {
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}

// Copied verbatim: JSON Schema keywords whose values are data or plain constraints.
var verbatim = map[string]bool{
	"type": true, "enum": true, "const": true, "required": true, "title": true,
	"description": true, "default": true, "format": true, "deprecated": true,
	"readOnly": true, "writeOnly": true, "examples": true, "minimum": true, "maximum": true,
	"exclusiveMinimum": true, "exclusiveMaximum": true, "multipleOf": true, "minLength": true,
	"maxLength": true, "pattern": true, "minItems": true, "maxItems": true, "uniqueItems": true,
	"minProperties": true, "maxProperties": true, "contentEncoding": true,
	"contentMediaType": true,
}

// Keywords whose value is one schema, a list of schemas, or a map of name to schema.
var (
	oneSchema  = map[string]bool{"items": true, "additionalProperties": true, "not": true, "contains": true, "propertyNames": true, "if": true, "then": true, "else": true, "unevaluatedItems": true, "unevaluatedProperties": true}
	schemaList = map[string]bool{"allOf": true, "anyOf": true, "oneOf": true, "prefixItems": true}
	schemaMap  = map[string]bool{"properties": true, "patternProperties": true, "dependentSchemas": true}
)

// counts says what was translated, for the summary on stderr.
var counts = map[string]int{}

// translate turns one OpenAPI schema into JSON Schema and returns the names it references.
func translate(v any, at string, refs *[]string) (any, error) {
	if b, ok := v.(bool); ok {
		return b, nil
	}
	in, ok := v.(*object)
	if !ok {
		return nil, fmt.Errorf("%s: a schema must be an object, got %T", at, v)
	}
	out := newObject()
	nullable := false
	for _, k := range in.keys {
		val := in.vals[k]
		where := at + "/" + k
		switch {
		case k == "nullable":
			b, ok := val.(bool)
			if !ok {
				return nil, fmt.Errorf("%s: nullable must be a boolean", where)
			}
			nullable = b
		case k == "discriminator":
			counts["discriminator dropped"]++
		case strings.HasPrefix(k, "x-"):
			counts[k+" dropped"]++
		case k == "example":
			if _, has := in.vals["examples"]; has {
				return nil, fmt.Errorf("%s: both example and examples", at)
			}
			out.set("examples", []any{val})
			counts["example → examples"]++
		case k == "$ref":
			s, ok := val.(string)
			if !ok || !strings.HasPrefix(s, refPrefix) {
				return nil, fmt.Errorf("%s: unsupported $ref %v", where, val)
			}
			name := strings.TrimPrefix(s, refPrefix)
			*refs = append(*refs, name)
			out.set(k, "#/$defs/"+name)
		case verbatim[k]:
			out.set(k, val)
		case oneSchema[k]:
			s, err := translate(val, where, refs)
			if err != nil {
				return nil, err
			}
			out.set(k, s)
		case schemaList[k]:
			list, ok := val.([]any)
			if !ok {
				return nil, fmt.Errorf("%s: want a list of schemas", where)
			}
			outList := make([]any, len(list))
			for i, item := range list {
				s, err := translate(item, where+"/"+strconv.Itoa(i), refs)
				if err != nil {
					return nil, err
				}
				outList[i] = s
			}
			out.set(k, outList)
		case schemaMap[k]:
			m, ok := val.(*object)
			if !ok {
				return nil, fmt.Errorf("%s: want a map of schemas", where)
			}
			outMap := newObject()
			for _, name := range m.keys {
				s, err := translate(m.vals[name], where+"/"+name, refs)
				if err != nil {
					return nil, err
				}
				outMap.set(name, s)
			}
			out.set(k, outMap)
		default:
			return nil, fmt.Errorf("%s: keyword %q is not handled; extend extract/main.go", where, k)
		}
	}
	if !nullable {
		return out, nil
	}
	counts["nullable → anyOf null"]++
	null := newObject()
	null.set("type", "null")
	wrapped := newObject()
	wrapped.set("anyOf", []any{out, null})
	return wrapped, nil
}

// fromYAML converts a YAML node into objects, lists and scalars.
func fromYAML(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.DocumentNode:
		return fromYAML(n.Content[0])
	case yaml.AliasNode:
		return fromYAML(n.Alias)
	case yaml.MappingNode:
		o := newObject()
		for i := 0; i < len(n.Content); i += 2 {
			k := n.Content[i].Value
			if k == "<<" {
				return nil, fmt.Errorf("line %d: YAML merge keys are not supported", n.Content[i].Line)
			}
			v, err := fromYAML(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			o.set(k, v)
		}
		return o, nil
	case yaml.SequenceNode:
		list := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := fromYAML(c)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		return list, nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!int", "!!float", "!!bool", "!!null":
			var v any
			if err := n.Decode(&v); err != nil {
				return nil, fmt.Errorf("line %d: %w", n.Line, err)
			}
			return v, nil
		default: // !!str, and !!timestamp kept as the text it is
			return n.Value, nil
		}
	}
	return nil, fmt.Errorf("line %d: unexpected YAML node kind %v", n.Line, n.Kind)
}

// write renders v as indented JSON, objects in key order, without HTML escaping.
func write(b *bytes.Buffer, v any, indent string) error {
	switch v := v.(type) {
	case *object:
		if len(v.keys) == 0 {
			b.WriteString("{}")
			return nil
		}
		b.WriteString("{\n")
		for i, k := range v.keys {
			b.WriteString(indent + "  ")
			if err := scalar(b, k); err != nil {
				return err
			}
			b.WriteString(": ")
			if err := write(b, v.vals[k], indent+"  "); err != nil {
				return err
			}
			if i < len(v.keys)-1 {
				b.WriteString(",")
			}
			b.WriteString("\n")
		}
		b.WriteString(indent + "}")
	case []any:
		if len(v) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteString("[\n")
		for i, item := range v {
			b.WriteString(indent + "  ")
			if err := write(b, item, indent+"  "); err != nil {
				return err
			}
			if i < len(v)-1 {
				b.WriteString(",")
			}
			b.WriteString("\n")
		}
		b.WriteString(indent + "]")
	default:
		return scalar(b, v)
	}
	return nil
}

func scalar(b *bytes.Buffer, v any) error {
	var s bytes.Buffer
	enc := json.NewEncoder(&s)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	b.Write(bytes.TrimSuffix(s.Bytes(), []byte("\n")))
	return nil
}

func run(specPath string) ([]byte, error) {
	raw, err := os.ReadFile(specPath)
	if err != nil {
		return nil, err
	}
	var node yaml.Node
	if err := yaml.Unmarshal(raw, &node); err != nil {
		return nil, fmt.Errorf("%s: %w", specPath, err)
	}
	doc, err := fromYAML(&node)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", specPath, err)
	}
	spec, ok := doc.(*object)
	if !ok {
		return nil, fmt.Errorf("%s: not an OpenAPI document", specPath)
	}
	version := ""
	if info, ok := spec.vals["info"].(*object); ok {
		version, _ = info.vals["version"].(string)
	}
	components, _ := spec.vals["components"].(*object)
	if components == nil {
		return nil, fmt.Errorf("%s: no components", specPath)
	}
	schemas, _ := components.vals["schemas"].(*object)
	if schemas == nil {
		return nil, fmt.Errorf("%s: no components.schemas", specPath)
	}

	defs := map[string]any{}
	queue := slices.Clone(roots)
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if _, done := defs[name]; done {
			continue
		}
		s, ok := schemas.vals[name]
		if !ok {
			return nil, fmt.Errorf("%s: no schema %s", specPath, name)
		}
		var refs []string
		out, err := translate(s, refPrefix+name, &refs)
		if err != nil {
			return nil, err
		}
		defs[name] = out
		queue = append(queue, refs...)
	}

	names := make([]string, 0, len(defs))
	for name := range defs {
		names = append(names, name)
	}
	slices.Sort(names)
	defsObj := newObject()
	for _, name := range names {
		defsObj.set(name, defs[name])
	}
	top := newObject()
	top.set("$schema", "https://json-schema.org/draft/2020-12/schema")
	top.set("$comment", fmt.Sprintf("OpenAI API %s: %s and every schema they reference, "+
		"from OpenAI's OpenAPI document (github.com/openai/openai-openapi, openapi.yaml), translated to JSON Schema 2020-12 "+
		"by extract/main.go. Generated: do not edit; README.md says how to regenerate.", version, strings.Join(roots, ", ")))
	top.set("$defs", defsObj)

	var b bytes.Buffer
	if err := write(&b, top, ""); err != nil {
		return nil, err
	}
	b.WriteString("\n")

	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	fmt.Fprintf(os.Stderr, "extract: %d schemas kept: %s\n", len(names), strings.Join(names, ", "))
	for _, k := range keys {
		fmt.Fprintf(os.Stderr, "extract: %s: %d\n", k, counts[k])
	}
	return b.Bytes(), nil
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: extract OPENAPI.yaml > schemas.json")
		os.Exit(2)
	}
	out, err := run(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "extract:", err)
		os.Exit(1)
	}
	if _, err := os.Stdout.Write(out); err != nil {
		fmt.Fprintln(os.Stderr, "extract:", err)
		os.Exit(1)
	}
}
