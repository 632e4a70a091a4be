package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"
	"google.golang.org/protobuf/proto"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
)

// A tool's result larger than its limit (the tool's maxResultBytes, else its server's, else
// executor.max-result-bytes) is cut to the limit rather than refused: the caller gets what fits,
// and a last text block, the marker, saying that it was cut and what was left out. The cut is
// made where the answer is read, so a result of any size costs the executor about its limit:
//
//   - over HTTP (limit.go) the body is read up to the limit and no further; the bytes read
//     (the head) are kept, and resultFromHead makes the result from them;
//   - over stdio and the legacy SSE stream, a line up to the connection's line limit is read
//     whole and cut once decoded; a longer one is dropped as it arrives but for its head;
//   - once decoded, cutResponse cuts whatever is still over the limit (JSON numbers grow in
//     structpb) and adds the marker.
//
// The call's gRPC trailer carries CutTrailer too, so a client can tell a cut result from one
// that merely says so.

// CutTrailer is the gRPC trailer key of a call whose result was cut; its value is the limit.
const CutTrailer = "toolmesh-result-cut"

// CutMarker starts the text of the marker block of a cut result.
const CutMarker = "[toolmesh: result cut"

// resultCut says how a result was cut.
type resultCut struct {
	limit  int    // bytes
	source string // the setting the limit comes from, for the marker
	size   int64  // the answer's size, as far as known (0: unknown)
	over   bool   // size is a lower bound: reading stopped there
	left   []string
}

// leave notes a part left out whole.
func (c *resultCut) leave(what string) {
	for _, l := range c.left {
		if l == what {
			return
		}
	}
	c.left = append(c.left, what)
}

// marker is the text of the block that ends a cut result.
func (c *resultCut) marker() string {
	size := "more than the limit"
	switch {
	case c.size > 0 && c.over:
		size = fmt.Sprintf("more than %d bytes", c.size)
	case c.size > 0:
		size = fmt.Sprintf("%d bytes", c.size)
	}
	left := ""
	if len(c.left) > 0 {
		left = "; left out: " + strings.Join(c.left, ", ")
	}
	return fmt.Sprintf("%s: the tool answered %s, over the %d-byte limit (%s); what follows the cut is left out%s]",
		CutMarker, size, c.limit, c.source, left)
}

// markerBytes is room kept for the marker block within the limit's neighbourhood: the marker
// is added after the result is cut to the limit, so a cut result is at most limit+markerBytes.
const markerBytes = 512

// cutResponse cuts out to limit bytes (its protobuf size) and ends it with the marker block,
// when out is over limit or was cut already (cut is set). It returns how out was cut, or nil
// when it was not. Content blocks are kept in order while they fit; the first that does not is
// cut when it is text and left out otherwise, with every block after it; structured content
// is kept only whole.
func cutResponse(out *toolmeshv1.ExecutorServiceCallToolResponse, limit int, source string, cut *resultCut) *resultCut {
	if cut == nil {
		if proto.Size(out) <= limit {
			return nil
		}
		cut = &resultCut{limit: limit, source: source, size: int64(proto.Size(out))}
	}
	used := 0
	kept := out.Content[:0]
	for i, c := range out.Content {
		// A field's tag and length take at most 6 bytes for a message under 256 MiB.
		n := proto.Size(c) + 6
		if used+n <= limit {
			kept = append(kept, c)
			used += n
			continue
		}
		if c.Text != nil && c.Data == nil {
			if room := limit - used - (n - len(c.GetText())); room > 0 {
				c.Text = proto.String(cutUTF8(c.GetText(), room))
				kept = append(kept, c)
				used = limit
			}
		} else {
			cut.leave(blockKind(c))
		}
		if len(out.Content[i+1:]) > 0 {
			cut.leave("the content blocks after it")
		}
		break
	}
	out.Content = kept
	if sc := out.GetStructuredContent(); sc != nil && used+proto.Size(sc)+6 > limit {
		out.StructuredContent = nil
		cut.leave("structured content")
	}
	if sc := out.GetStructuredContentJson(); sc != nil && used+len(sc)+6 > limit {
		out.StructuredContentJson = nil
		cut.leave("structured content")
	}
	out.Content = append(out.Content, &toolmeshv1.Content{Type: "text", Text: proto.String(cut.marker())})
	return cut
}

// blockKind names a content block for the marker.
func blockKind(c *toolmeshv1.Content) string {
	switch c.GetType() {
	case "image":
		return "an image"
	case "audio":
		return "audio"
	case "resource":
		return "an embedded resource"
	}
	return "a " + c.GetType() + " block"
}

// cutUTF8 is s cut to at most n bytes without splitting a character.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// resultFromHead makes a call's result from the first bytes of its answer (a JSON-RPC
// response, bare or as an SSE event or data line) when the rest was not read. The JSON is
// closed where it was cut (closeJSON); what was cut within a text block keeps its text, a
// last block of any other kind is left out (half an image is no image), and so is structured
// content, which a cut may have left half-built. ok is false when the head holds no result (a
// notification, an error answer): the caller then refuses the call as too large.
func resultFromHead(head []byte, cut *resultCut) (*mcp.CallToolResult, bool) {
	closed, ok := closeJSON(messageOf(head))
	if !ok {
		return nil, false
	}
	var env struct {
		Result *json.RawMessage `json:"result"`
	}
	if json.Unmarshal(closed, &env) != nil || env.Result == nil {
		return nil, false
	}
	res, err := mcp.ParseCallToolResult(env.Result)
	if err != nil {
		// Cut before its content: the marker alone says what happened.
		res = &mcp.CallToolResult{}
	}
	if res.StructuredContent != nil {
		res.StructuredContent, res.RawStructuredContent = nil, nil
		cut.leave("structured content")
	}
	if n := len(res.Content); n > 0 {
		switch c := res.Content[n-1].(type) {
		case mcp.TextContent, *mcp.TextContent:
		case mcp.EmbeddedResource:
			if _, text := c.Resource.(mcp.TextResourceContents); !text {
				res.Content = res.Content[:n-1]
				cut.leave("an embedded resource")
			}
		default:
			res.Content = res.Content[:n-1]
			if pc := contentToProto(c); pc != nil {
				cut.leave(blockKind(pc))
			} else {
				cut.leave("a content block")
			}
		}
	}
	return res, true
}

// messageOf is the JSON of one message: head itself, or the data of an SSE event (lines
// "data: ...", joined by newlines, as the event stream format defines).
func messageOf(head []byte) []byte {
	trimmed := bytes.TrimLeft(head, " \t\r\n")
	if len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[') {
		return trimmed
	}
	var data []byte
	first := true
	for line := range bytes.Lines(head) {
		line = bytes.TrimRight(line, "\r\n")
		v, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		v = bytes.TrimPrefix(v, []byte(" "))
		if !first {
			data = append(data, '\n')
		}
		data = append(data, v...)
		first = false
	}
	return data
}

// closeJSON turns the first bytes of a JSON document into a whole one: it goes back to the
// last point where a value was complete, or to a character boundary inside a string value,
// and closes the string and every array and object open there. A key, a number or a literal
// that was cut is dropped with what it belonged to. ok is false when no such point exists.
//
// Every point it may cut at is marked as the scan passes it, with how deep the containers
// are; a container only closes at such a point, so those below the last mark are still the
// ones open at the end.
func closeJSON(b []byte) ([]byte, bool) {
	const (
		wantKey   = iota // in an object: a key or the end
		wantColon        // after a key
		wantValue        // after a colon, in an array, or at the top
		wantComma        // after a value: a comma or the end
	)
	var stack []jsonFrame
	safe, safeDepth, safeInString := -1, 0, false
	mark := func(pos int, inString bool) { safe, safeDepth, safeInString = pos, len(stack), inString }
	valueDone := func(pos int) {
		if len(stack) > 0 {
			stack[len(stack)-1].state = wantComma
		}
		mark(pos, false)
	}
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) == 0 || t[0] != '{' && t[0] != '[' {
		return nil, false
	}
	inString, isKey, escaped, hexLeft, scalar, strStart := false, false, false, 0, false, 0
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch {
			case escaped && hexLeft > 0:
				if hexLeft--; hexLeft == 0 {
					escaped = false
				}
			case escaped:
				escaped, hexLeft = false, 0
				if c == 'u' {
					escaped, hexLeft = true, 4
				}
			case c == '\\':
				if !isKey {
					mark(i, true)
				}
				escaped = true
			case c == '"':
				inString = false
				if isKey {
					stack[len(stack)-1].state = wantColon
				} else {
					valueDone(i + 1)
				}
			default:
				if !isKey && utf8.RuneStart(c) {
					mark(i, true)
				}
			}
			continue
		}
		if isScalarByte(c) {
			scalar = true
			continue
		}
		if scalar {
			scalar = false
			valueDone(i)
		}
		switch c {
		case '{', '[':
			stack = append(stack, jsonFrame{obj: c == '{', state: wantKey})
			if c == '[' {
				stack[len(stack)-1].state = wantValue
			}
			mark(i+1, false)
		case '}', ']':
			if len(stack) == 0 {
				return finishJSON(b, safe, safeDepth, safeInString, stack)
			}
			stack = stack[:len(stack)-1]
			valueDone(i + 1)
		case ',':
			if len(stack) > 0 {
				if top := &stack[len(stack)-1]; top.obj {
					top.state = wantKey
				} else {
					top.state = wantValue
				}
			}
		case ':':
			if len(stack) > 0 {
				stack[len(stack)-1].state = wantValue
			}
		case '"':
			inString, strStart = true, i+1
			isKey = len(stack) > 0 && stack[len(stack)-1].obj && stack[len(stack)-1].state == wantKey
			if !isKey {
				mark(i+1, true)
			}
		}
	}
	if inString && !isKey && !escaped {
		// The string's last character counts when it is whole.
		j := len(b) - 1
		for j > strStart && !utf8.RuneStart(b[j]) {
			j--
		}
		if j >= strStart && utf8.FullRune(b[j:]) {
			mark(len(b), true)
		}
	}
	return finishJSON(b, safe, safeDepth, safeInString, stack)
}

// jsonFrame is an array or object closeJSON is in, and what it expects next.
type jsonFrame struct {
	obj   bool
	state int
}

// finishJSON cuts b at safe and closes what was open there.
func finishJSON(b []byte, safe, depth int, inString bool, stack []jsonFrame) ([]byte, bool) {
	if safe < 0 {
		return nil, false
	}
	out := append([]byte(nil), b[:safe]...)
	if inString {
		out = append(out, '"')
	}
	for i := depth - 1; i >= 0; i-- {
		if stack[i].obj {
			out = append(out, '}')
		} else {
			out = append(out, ']')
		}
	}
	return out, true
}

// isScalarByte reports whether c belongs to a number or to true, false or null.
func isScalarByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c == '-' || c == '+' || c == '.' || c == 'E'
}

type cutNoteKey struct{}

// withCutNote returns a context in which noteCut records how the call's result was cut.
func withCutNote(ctx context.Context, note **resultCut) context.Context {
	return context.WithValue(ctx, cutNoteKey{}, note)
}

// noteCut records c in the note of ctx, if it has one.
func noteCut(ctx context.Context, c *resultCut) {
	if note, ok := ctx.Value(cutNoteKey{}).(**resultCut); ok {
		*note = c
	}
}

// resultLimit is the bound on the results of tool (of server, configured as srv) and the setting it comes from: the tool's own
// maxResultBytes, else its server's, else executor.max-result-bytes.
func resultLimit(server string, srv mcpconfig.Server, cfg Config, tool string) (int, string) {
	if t, ok := srv.Tools[tool]; ok && t.MaxResultBytes > 0 {
		return t.MaxResultBytes, fmt.Sprintf("tools.%s.maxResultBytes of server %q", tool, server)
	}
	if srv.MaxResultBytes > 0 {
		return srv.MaxResultBytes, fmt.Sprintf("maxResultBytes of server %q", server)
	}
	return cfg.MaxResultBytes, "executor.max-result-bytes"
}

// largestResultLimit is the largest result limit of any of srv's tools.
func largestResultLimit(srv mcpconfig.Server, cfg Config) int {
	n := cfg.MaxResultBytes
	if srv.MaxResultBytes > 0 {
		n = srv.MaxResultBytes
	}
	for _, t := range srv.Tools {
		n = max(n, t.MaxResultBytes)
	}
	return n
}
