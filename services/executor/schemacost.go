package executor

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// A tool's input schema is measured before the tool enters the catalog: a
// schema whose subschemas apply the same $ref twice at the same place (anyOf,
// allOf, oneOf, ...) doubles the validator's work with every level, and 30
// levels of that fit in 2 KB and would take hours and gigabytes for one call.
//
// The measure is perValue: an upper bound on how many times the validator
// evaluates a subschema (one call of its validate, counting $ref targets) at a
// single value of the arguments. A call's work is then at most
// perValue × (the number of values in its arguments); validate.go checks that
// product against the call's budget before validating.
//
// It is computed on the compiled schema, so $ref, $dynamicRef and
// $recursiveRef are resolved by the validator's own compiler, and memoised per
// subschema (and instance depth), so measuring is linear in the schema's size
// even when the bound it finds is exponential:
//
//	C(s)    = 1 + Σ over in-place applicators a of s: C(a)
//	M(s, d) = max(C(s), the most at any one child of P(s, d)), M(s, 0) = C(s)
//	P(s, d) = s's own child applicators + Σ over in-place applicators a of s: P(a, d)
//
// In-place applicators evaluate the same value ($ref, allOf, anyOf, oneOf,
// not, if/then/else, dependentSchemas); where only one of several is taken (a
// $dynamicRef's possible targets, then or else) the largest counts. P(s, d)
// is what s makes the validator evaluate at each child of the value, d levels
// of arguments deep, kept per child: properties[k] (or additionalProperties)
// at property k, plus every patternProperties, propertyNames and
// unevaluatedProperties schema (any of them may apply to the same property);
// likewise for array items; each contributes M(child, d-1). Kept per child,
// two allOf branches that recurse into different properties (a tree's "left"
// and "right") do not add up, and since a value is one type, the object,
// array and string parts of P are never added either. Summing where the
// validator may stop early only overestimates.
//
// Recursive schemas (a $ref back to an enclosing schema under properties or
// items) are followed costHorizon levels into the arguments: one that
// multiplies its work per level exceeds any sensible limit well before that;
// one that does not (a tree, a linked list) costs the same at every level.
// A $ref cycle that never descends into the arguments is refused: the
// validator reports every value against it as a "reference cycle" anyway, and
// an all-in-place cycle can fan out without bound.

const (
	// costHorizon is how many levels into the arguments a recursive schema is followed.
	costHorizon = 32
	// costCap saturates the arithmetic; any limit is far below it.
	costCap = int64(1) << 53
	// maxCostWork bounds measuring itself: a schema whose measure needs more
	// child slots than this is refused as too complex to measure. Schemas
	// within executor.schema-max-bytes need a small fraction of it.
	maxCostWork = 1 << 20
)

// schemaCost is what limits.go compares with the executor.schema-* limits.
type schemaCost struct {
	perValue int64
}

// errInPlaceCycle: see above.
var errInPlaceCycle = errors.New("$ref cycle that never descends into the arguments")

// measureSchema measures a compiled schema.
func measureSchema(root *jsonschema.Schema) (schemaCost, error) {
	m := newCostMeter(root)
	if loc, ok := m.inPlaceCycle(); ok {
		return schemaCost{}, fmt.Errorf("%w (at %s)", errInPlaceCycle, loc)
	}
	n := m.perValue(root, costHorizon)
	if m.work > maxCostWork {
		return schemaCost{}, errors.New("too complex to measure")
	}
	return schemaCost{perValue: n}, nil
}

type depthKey struct {
	s *jsonschema.Schema
	d int
}

type costMeter struct {
	all       []*jsonschema.Schema            // every schema reachable from the root
	dynamic   map[string][]*jsonschema.Schema // $dynamicAnchor → schemas declaring it
	recursive []*jsonschema.Schema            // schemas with "$recursiveAnchor": true
	c         map[*jsonschema.Schema]int64
	g         map[depthKey]*profile
	work      int64 // child slots built so far, bounded by maxCostWork
}

func newCostMeter(root *jsonschema.Schema) *costMeter {
	m := &costMeter{
		dynamic: map[string][]*jsonschema.Schema{},
		c:       map[*jsonschema.Schema]int64{},
		g:       map[depthKey]*profile{},
	}
	// The anchors first: they are the possible targets of dynamic references.
	seen := map[*jsonschema.Schema]bool{root: true}
	m.all = []*jsonschema.Schema{root}
	for i := 0; i < len(m.all); i++ {
		s := m.all[i]
		if s.DynamicAnchor != "" {
			m.dynamic[s.DynamicAnchor] = append(m.dynamic[s.DynamicAnchor], s)
		}
		if s.RecursiveAnchor {
			m.recursive = append(m.recursive, s)
		}
		next := children(s).all()
		next = append(next, s.Ref, s.RecursiveRef, s.Not, s.If, s.Then, s.Else)
		if s.DynamicRef != nil {
			next = append(next, s.DynamicRef.Ref)
		}
		next = append(next, s.AllOf...)
		next = append(next, s.AnyOf...)
		next = append(next, s.OneOf...)
		for _, t := range sortedValues(s.DependentSchemas) {
			next = append(next, t)
		}
		for _, k := range sortedKeys(s.Dependencies) {
			if t, ok := s.Dependencies[k].(*jsonschema.Schema); ok {
				next = append(next, t)
			}
		}
		for _, t := range next {
			if t != nil && !seen[t] {
				seen[t] = true
				m.all = append(m.all, t)
			}
		}
	}
	return m
}

// inPlace returns the applicators of s that evaluate the same value, each as
// the alternatives one of which is taken.
func (m *costMeter) inPlace(s *jsonschema.Schema) [][]*jsonschema.Schema {
	if s.Bool != nil {
		return nil
	}
	var out [][]*jsonschema.Schema
	one := func(t *jsonschema.Schema) {
		if t != nil {
			out = append(out, []*jsonschema.Schema{t})
		}
	}
	one(s.Ref)
	if s.RecursiveRef != nil {
		alt := []*jsonschema.Schema{s.RecursiveRef}
		if s.RecursiveRef.RecursiveAnchor {
			alt = append(alt, m.recursive...)
		}
		out = append(out, alt)
	}
	if d := s.DynamicRef; d != nil && d.Ref != nil {
		alt := []*jsonschema.Schema{d.Ref}
		if d.Anchor != "" {
			alt = append(alt, m.dynamic[d.Anchor]...)
		}
		out = append(out, alt)
	}
	one(s.Not)
	for _, l := range [][]*jsonschema.Schema{s.AllOf, s.AnyOf, s.OneOf} {
		for _, t := range l {
			one(t)
		}
	}
	one(s.If)
	switch {
	case s.Then != nil && s.Else != nil:
		out = append(out, []*jsonschema.Schema{s.Then, s.Else})
	default:
		one(s.Then)
		one(s.Else)
	}
	for _, t := range sortedValues(s.DependentSchemas) {
		one(t)
	}
	for _, k := range sortedKeys(s.Dependencies) {
		if t, ok := s.Dependencies[k].(*jsonschema.Schema); ok {
			one(t)
		}
	}
	return out
}

// childApps are the applicators of one schema that evaluate child values:
// of an object, of an array, and the content of a string.
type childApps struct {
	obj, arr childSet
	content  *jsonschema.Schema
}

// childSet: named[k] applies to the child k (a property; an array's prefix
// item, by index), rest to the other children, and each of anyChild may
// apply to any child.
type childSet struct {
	named    map[string]*jsonschema.Schema
	rest     *jsonschema.Schema
	anyChild []*jsonschema.Schema
}

func (c childApps) all() []*jsonschema.Schema {
	out := []*jsonschema.Schema{c.content}
	for _, cs := range []childSet{c.obj, c.arr} {
		out = append(out, cs.rest)
		out = append(out, sortedValues(cs.named)...)
		out = append(out, cs.anyChild...)
	}
	return out
}

func children(s *jsonschema.Schema) childApps {
	var c childApps
	if s.Bool != nil {
		return c
	}
	c.obj.named = s.Properties
	if t, ok := s.AdditionalProperties.(*jsonschema.Schema); ok {
		c.obj.rest = t
	}
	for _, p := range slices.SortedFunc(maps.Keys(s.PatternProperties), func(a, b jsonschema.Regexp) int {
		return strings.Compare(a.String(), b.String())
	}) {
		c.obj.anyChild = append(c.obj.anyChild, s.PatternProperties[p])
	}
	if s.PropertyNames != nil {
		c.obj.anyChild = append(c.obj.anyChild, s.PropertyNames)
	}
	if s.UnevaluatedProperties != nil {
		c.obj.anyChild = append(c.obj.anyChild, s.UnevaluatedProperties)
	}
	prefix := s.PrefixItems
	switch items := s.Items.(type) {
	case []*jsonschema.Schema:
		prefix = items
		if t, ok := s.AdditionalItems.(*jsonschema.Schema); ok {
			c.arr.rest = t
		}
	case *jsonschema.Schema:
		c.arr.rest = items
	}
	if s.Items2020 != nil {
		c.arr.rest = s.Items2020
	}
	if len(prefix) > 0 {
		c.arr.named = make(map[string]*jsonschema.Schema, len(prefix))
		for i, t := range prefix {
			c.arr.named[strconv.Itoa(i)] = t
		}
	}
	if s.Contains != nil {
		c.arr.anyChild = append(c.arr.anyChild, s.Contains)
	}
	if s.UnevaluatedItems != nil {
		c.arr.anyChild = append(c.arr.anyChild, s.UnevaluatedItems)
	}
	c.content = s.ContentSchema
	return c
}

// slots is what some schemas applied to one value make the validator
// evaluate at each child of it: named[k] at the child k (a property, or an
// array index), rest at any other.
type slots struct {
	named map[string]int64
	rest  int64
}

func (a slots) at(k string) int64 {
	if v, ok := a.named[k]; ok {
		return v
	}
	return a.rest
}

func (a slots) most() int64 {
	n := a.rest
	for _, v := range a.named {
		n = max(n, v)
	}
	return n
}

// combine is a+b (both schemas apply), or the larger at each child (one of
// them does). Keys named by one side take the other's rest.
func (m *costMeter) combine(a, b slots, both bool) slots {
	if len(a.named) == 0 && len(b.named) == 0 {
		if both {
			return slots{rest: add(a.rest, b.rest)}
		}
		return slots{rest: max(a.rest, b.rest)}
	}
	out := slots{named: make(map[string]int64, len(a.named)+len(b.named))}
	m.work += int64(len(a.named) + len(b.named))
	f := func(x, y int64) int64 {
		if both {
			return add(x, y)
		}
		return max(x, y)
	}
	for k := range a.named {
		out.named[k] = f(a.at(k), b.at(k))
	}
	for k := range b.named {
		out.named[k] = f(a.at(k), b.at(k))
	}
	out.rest = f(a.rest, b.rest)
	return out
}

// profile is slots for the children of an object and of an array, and the
// content of a string: a value is one of the three, so only the largest counts.
type profile struct {
	obj, arr slots
	str      int64
}

func (p *profile) most() int64 { return max(p.obj.most(), p.arr.most(), p.str) }

func (p *profile) isZero() bool {
	return p.str == 0 && p.obj.rest == 0 && p.arr.rest == 0 && len(p.obj.named) == 0 && len(p.arr.named) == 0
}

// inPlaceCycle finds a cycle of in-place applicators reachable from root.
func (m *costMeter) inPlaceCycle() (string, bool) {
	const (
		open = 1
		done = 2
	)
	state := map[*jsonschema.Schema]int{}
	var loc string
	var visit func(s *jsonschema.Schema) bool
	visit = func(s *jsonschema.Schema) bool {
		switch state[s] {
		case open:
			loc = s.Location
			return true
		case done:
			return false
		}
		state[s] = open
		for _, alt := range m.inPlace(s) {
			for _, t := range alt {
				if visit(t) {
					return true
				}
			}
		}
		state[s] = done
		return false
	}
	// Every schema, not only root's in-place closure: a cycle may hang
	// under a property.
	for _, s := range m.all {
		if visit(s) {
			return loc, true
		}
	}
	return "", false
}

// here is C(s): evaluations at the value s is applied to.
func (m *costMeter) here(s *jsonschema.Schema) int64 {
	if v, ok := m.c[s]; ok {
		return v
	}
	n := int64(1)
	for _, alt := range m.inPlace(s) {
		best := int64(0)
		for _, t := range alt {
			best = max(best, m.here(t))
		}
		n = add(n, best)
	}
	m.c[s] = n
	return n
}

// below is G(s, d): evaluations at any one value under the value s is applied to.
func (m *costMeter) below(s *jsonschema.Schema, d int) int64 {
	if d == 0 {
		return 0
	}
	return m.profile(s, d).most()
}

// profile is what s makes the validator evaluate at the children of the value
// it is applied to: its own child applicators and those of its in-place ones.
func (m *costMeter) profile(s *jsonschema.Schema, d int) *profile {
	k := depthKey{s, d}
	if p, ok := m.g[k]; ok {
		return p
	}
	if m.work > maxCostWork {
		return &profile{str: costCap} // measureSchema reports it
	}
	c := children(s)
	p := &profile{obj: m.slots(c.obj, d), arr: m.slots(c.arr, d)}
	if c.content != nil {
		p.str = m.perValue(c.content, d-1)
	}
	for _, alt := range m.inPlace(s) {
		q := m.profile(alt[0], d)
		for _, t := range alt[1:] {
			r := m.profile(t, d)
			q = &profile{obj: m.combine(q.obj, r.obj, false), arr: m.combine(q.arr, r.arr, false), str: max(q.str, r.str)}
		}
		if p.isZero() {
			p = q // profiles are never changed once built: share it
			continue
		}
		p = &profile{obj: m.combine(p.obj, q.obj, true), arr: m.combine(p.arr, q.arr, true), str: add(p.str, q.str)}
	}
	m.g[k] = p
	return p
}

// slots is what one schema's child applicators evaluate at each child, d
// levels deep.
func (m *costMeter) slots(cs childSet, d int) slots {
	at := func(t *jsonschema.Schema) int64 {
		if t == nil {
			return 0
		}
		return m.perValue(t, d-1)
	}
	shared := int64(0)
	for _, t := range cs.anyChild {
		shared = add(shared, at(t))
	}
	out := slots{rest: add(at(cs.rest), shared)}
	if len(cs.named) > 0 {
		out.named = make(map[string]int64, len(cs.named))
		m.work += int64(len(cs.named))
		for k, t := range cs.named {
			out.named[k] = add(at(t), shared)
		}
	}
	return out
}

// perValue is M(s, d).
func (m *costMeter) perValue(s *jsonschema.Schema, d int) int64 {
	return max(m.here(s), m.below(s, d))
}

// sortedValues keeps messages (the location of a cycle) the same from one listing to the next.
func sortedValues[V any](m map[string]V) []V {
	out := make([]V, 0, len(m))
	for _, k := range sortedKeys(m) {
		out = append(out, m[k])
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func add(a, b int64) int64 {
	if a >= costCap-b {
		return costCap
	}
	return a + b
}
