package gorilla

// The length model: a tool's argument schemas compiled once into shapes, whose longest value
// under given limits shapeLen computes without touching the schema maps again. Fitting limits
// to a budget evaluates a call's length thousands of times; the decisions that do not depend on
// the limits ($ref, enum, const, anyOf, types) are taken here once, the way value takes them.

// Kinds of shape.
const (
	shAny    = iota // a free-form value
	shFixed         // a literal or keyword of n bytes
	shStr           // a string
	shInt           // an integer
	shNum           // a number
	shAlt           // the longest of alts
	shList          // a list of item (nil: free-form items)
	shObject        // a dict with declared keys (keys[i] bytes, props[i] values)
	shDict          // a free-form dict with values item (nil: free-form values)
)

type shape struct {
	kind  int
	n     int
	alts  []*shape
	item  *shape
	keys  []int
	props []*shape
	req   []bool
}

var (
	anyShape  = &shape{kind: shAny}
	strShape  = &shape{kind: shStr}
	intShape  = &shape{kind: shInt}
	numShape  = &shape{kind: shNum}
	boolShape = &shape{kind: shFixed, n: boolLen}
	noneShape = &shape{kind: shFixed, n: noneLen}
)

// compileShape is the shape of schema s as value writes it; root resolves $refs, sd counts the
// schemas followed.
func compileShape(root map[string]any, s any, sd int) *shape {
	m, ok := s.(map[string]any)
	if !ok || sd > maxSchemaDepth {
		return anyShape
	}
	if ref, ok := m["$ref"].(string); ok {
		if target, ok := resolve(root, ref); ok {
			return compileShape(root, target, sd+1)
		}
		return anyShape
	}
	if enum, ok := m["enum"].([]any); ok && len(enum) > 0 {
		n, found := 0, false
		for _, v := range enum {
			if l, ok := literalLen(v); ok {
				n, found = max(n, l), true
			}
		}
		if found {
			return &shape{kind: shFixed, n: n}
		}
	}
	if v, ok := m["const"]; ok {
		if l, ok := literalLen(v); ok {
			return &shape{kind: shFixed, n: l}
		}
	}
	types := typesOf(m)
	var alts []*shape
	for _, key := range []string{"anyOf", "oneOf"} {
		for _, sub := range asSlice(m[key]) {
			alts = append(alts, compileShape(root, sub, sd+1))
		}
	}
	if all := asSlice(m["allOf"]); len(all) == 1 && len(types) == 0 {
		alts = append(alts, compileShape(root, all[0], sd+1))
	}
	if len(alts) > 0 && len(types) == 0 {
		if b, _ := m["nullable"].(bool); b {
			alts = append(alts, noneShape)
		}
		return alt(alts)
	}
	types = implicitTypes(m, types)
	if len(types) == 0 {
		return anyShape
	}
	alts = alts[:0]
	for _, t := range types {
		switch typeKind(t) {
		case kindString:
			alts = append(alts, strShape)
		case kindInteger:
			alts = append(alts, intShape)
		case kindNumber:
			alts = append(alts, numShape)
		case kindBool:
			alts = append(alts, boolShape)
		case kindNull:
			alts = append(alts, noneShape)
		case kindArray:
			sh := &shape{kind: shList}
			if it, ok := m["items"].(map[string]any); ok {
				sh.item = compileShape(root, it, sd+1)
			}
			alts = append(alts, sh)
		case kindObject:
			alts = append(alts, compileObject(root, m, sd))
		default:
			alts = append(alts, anyShape)
		}
	}
	return alt(alts)
}

func alt(alts []*shape) *shape {
	if len(alts) == 1 {
		return alts[0]
	}
	return &shape{kind: shAlt, alts: alts}
}

// compileObject is the shape of object as written: declared properties, or a free-form dict.
func compileObject(root, m map[string]any, sd int) *shape {
	names, schemas, required := objectKeys(m)
	if len(names) == 0 {
		sh := &shape{kind: shDict}
		if ap, ok := m["additionalProperties"].(map[string]any); ok {
			sh.item = compileShape(root, ap, sd+1)
		}
		return sh
	}
	sh := &shape{kind: shObject}
	for _, name := range names {
		sh.keys = append(sh.keys, max(len(appendQuoted(nil, name, '\'')), len(appendQuoted(nil, name, '"'))))
		sh.props = append(sh.props, compileShape(root, schemas[name], sd+1))
		sh.req = append(sh.req, required[name])
	}
	return sh
}

// shapeLen is the most bytes of a value of shape s within lim, at container depth cd.
func shapeLen(s *shape, lim limits, cd int) int {
	switch s.kind {
	case shFixed:
		return s.n
	case shStr:
		return strLen(lim)
	case shInt:
		return intLen(lim)
	case shNum:
		return numLen(lim)
	case shAlt:
		n := 0
		for _, a := range s.alts {
			n = max(n, shapeLen(a, lim, cd))
		}
		return n
	case shList:
		if cd >= lim.depth || lim.items == 0 {
			return 2
		}
		if s.item == nil {
			return listLen(lim, anyLen(lim, cd+1))
		}
		return listLen(lim, shapeLen(s.item, lim, cd+1))
	case shObject:
		deep := cd >= lim.depth // required keys only
		n, k := 2, 0            // {}
		for i, p := range s.props {
			if deep && !s.req[i] {
				continue
			}
			if k > 0 {
				n += sepLen
			}
			k++
			n += s.keys[i] + 2 + shapeLen(p, lim, cd+1)
		}
		return n
	case shDict:
		if cd >= lim.depth {
			return 2
		}
		if s.item == nil {
			return dictLen(lim, strLen(lim), anyLen(lim, cd+1))
		}
		return dictLen(lim, strLen(lim), shapeLen(s.item, lim, cd+1))
	}
	return anyLen(lim, cd)
}
