package mcpface

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/policy"
)

const (
	wideToken   = "wide-token-0123456789"
	narrowToken = "narrow-token-0123456789"
	traceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
)

// shortFace is a face of TestShortCallAnswersAsMCPGo, with its spans and metrics.
type shortFace struct {
	h       *harness
	spans   *tracetest.InMemoryExporter
	metrics *sdkmetric.ManualReader
}

// newShortFace is a face over srv.echo, srv.hdr (an x-mcp-header parameter) and two.z, which
// the narrow token may not see; short false leaves every call to mcp-go's server.
func newShortFace(t *testing.T, short bool) *shortFace {
	t.Helper()
	tel, spans, metrics := testTelemetry(t)
	hdr := testTool(t, "srv.hdr")
	hdr.InputSchema, _ = structpb.NewStruct(map[string]any{"type": "object", "properties": map[string]any{
		"region": map[string]any{"type": "string", "x-mcp-header": "Region"}}})
	h := newHarness(t, newExecutorDouble(testTool(t, "srv.echo"), hdr, testTool(t, "two.z")), harnessOptions{
		cfg:    Config{noShortPath: !short},
		tel:    tel,
		tokens: "narrow:" + narrowToken + ",wide:" + wideToken,
		policy: policy.Config{Tokens: map[string]policy.Scope{"narrow": {Call: []string{"srv"}}, "wide": {Call: []string{"*"}}}},
	})
	h.tools.mu.Lock()
	h.tools.result = cannedResult
	h.tools.mu.Unlock()
	return &shortFace{h: h, spans: spans, metrics: metrics}
}

// cannedResult answers a call by its "case" argument.
func cannedResult(req *toolmeshv1.CallToolRequest) (*toolmeshv1.CallToolResponse, error) {
	var args map[string]any
	_ = json.Unmarshal(req.GetArgumentsJson(), &args)
	switch args["case"] {
	case "error":
		return &toolmeshv1.CallToolResponse{IsError: true, Content: []*toolmeshv1.Content{{Type: "text", Text: proto.String("bad input")}}}, nil
	case "structured":
		return &toolmeshv1.CallToolResponse{StructuredContentJson: []byte(`{"sum":5}`), Content: []*toolmeshv1.Content{{Type: "text", Text: proto.String("5")}}}, nil
	case "down":
		return nil, status.Error(codes.Unavailable, "MCP server srv is unreachable")
	case "gone":
		return nil, status.Error(codes.NotFound, "unknown tool srv.echo")
	case "internal":
		return nil, status.Error(codes.Internal, "boom")
	}
	return &toolmeshv1.CallToolResponse{Content: []*toolmeshv1.Content{{Type: "text", Text: proto.String("ok " + req.GetServer() + "." + req.GetName() + " " + string(req.GetArgumentsJson()))}}}, nil
}

// answer is what a client reads of a response.
type answer struct {
	Status      int
	ContentType string
	SessionID   string
	Body        any // decoded JSON, or the text when it is not JSON
}

func (sf *shortFace) send(t *testing.T, path, token string, header http.Header, body string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := sf.sendContext(ctx, path, token, header, body)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// sendContext is send with the caller's context, which closes the request when it ends; it may
// be called from any goroutine.
func (sf *shortFace) sendContext(ctx context.Context, path, token string, header http.Header, body string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, sf.h.url+path, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header = header.Clone()
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), SessionID: resp.Header.Get("Mcp-Session-Id"), Body: string(b)}
	var v any
	if json.Unmarshal(b, &v) == nil {
		a.Body = v
	}
	return a, nil
}

// initialize opens a 2025-era session at version with a raw initialize (mcp-go answers it) and
// returns its id.
func (sf *shortFace) initialize(t *testing.T, path, version string) string {
	t.Helper()
	h := jsonHeader()
	h.Set("Mcp-Protocol-Version", version)
	a := sf.send(t, path, wideToken, h, fmt.Sprintf(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`, version))
	if a.Status != http.StatusOK || a.SessionID == "" {
		t.Fatalf("initialize at %s: %d %v", version, a.Status, a.Body)
	}
	return a.SessionID
}

// spanView is what the comparison reads of a span: ids and times differ between the faces.
type spanView struct {
	Name, Kind, Status, StatusDesc string
	Attrs                          map[string]string
	Parent                         string // the client's span id when it sent one, else "local" or "none"
	Links                          int
}

func (sf *shortFace) takeSpans() []spanView {
	var out []spanView
	for _, s := range sf.spans.GetSpans().Snapshots() {
		v := spanView{Name: s.Name(), Kind: s.SpanKind().String(), Status: s.Status().Code.String(), StatusDesc: s.Status().Description,
			Attrs: map[string]string{}, Parent: "none", Links: len(s.Links())}
		for _, a := range s.Attributes() {
			v.Attrs[string(a.Key)] = a.Value.Emit()
		}
		for _, k := range []string{"mcp.session.id", "client.port"} {
			if _, ok := v.Attrs[k]; ok {
				v.Attrs[k] = "(set)"
			}
		}
		switch {
		case s.Parent().IsRemote():
			v.Parent = s.Parent().SpanID().String()
		case s.Parent().IsValid():
			v.Parent = "local"
		}
		out = append(out, v)
	}
	sf.spans.Reset()
	return out
}

// durations are the counts of mcp.server.operation.duration by attribute set.
func (sf *shortFace) durations(t *testing.T) map[string]uint64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := sf.metrics.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "mcp.server.operation.duration" {
				for _, dp := range h.DataPoints {
					out[dp.Attributes.Encoded(attribute.DefaultEncoder())] += dp.Count
				}
			}
		}
	}
	return out
}

func jsonHeader() http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	return h
}

// modernRequest is a tools/call at 2026-07-28 as a client sends it: id, the tool's name, its
// arguments' text ("" for none) and more _meta (",KEY:VALUE...").
func modernRequest(id, name, args, meta string) (http.Header, string) {
	h := jsonHeader()
	h.Set("Mcp-Protocol-Version", mcp.LATEST_PROTOCOL_VERSION)
	h.Set("Mcp-Method", "tools/call")
	h.Set("Mcp-Name", name)
	if args != "" {
		args = `,"arguments":` + args
	}
	return h, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":%q%s,"_meta":{`+
		`"io.modelcontextprotocol/protocolVersion":%q,"io.modelcontextprotocol/clientCapabilities":{},`+
		`"io.modelcontextprotocol/clientInfo":{"name":"t","version":"0"}%s}}}`, id, name, args, mcp.LATEST_PROTOCOL_VERSION, meta)
}

// legacyRequest is a tools/call of a 2025-era session.
func legacyRequest(version, session, name, args string) (http.Header, string) {
	h := jsonHeader()
	h.Set("Mcp-Protocol-Version", version)
	if session != "" {
		h.Set("Mcp-Session-Id", session)
	}
	return h, fmt.Sprintf(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, name, args)
}

// TestShortCallAnswersAsMCPGo sends each request to a face with the short path for tools/call
// and to one without it, where mcp-go's server answers every call: the same status, headers,
// JSON body, spans and metrics, and the short path answers the calls it should.
func TestShortCallAnswersAsMCPGo(t *testing.T) {
	on, off := newShortFace(t, true), newShortFace(t, false)
	type request func(t *testing.T, sf *shortFace) (http.Header, string)
	modern := func(id, name, args, meta string) request {
		return func(*testing.T, *shortFace) (http.Header, string) { return modernRequest(id, name, args, meta) }
	}
	edit := func(r request, fn func(h http.Header, body string) string) request {
		return func(t *testing.T, sf *shortFace) (http.Header, string) {
			h, b := r(t, sf)
			return h, fn(h, b)
		}
	}
	setHeader := func(r request, k, v string) request {
		return edit(r, func(h http.Header, b string) string {
			if v == "" {
				h.Del(k)
			} else {
				h.Set(k, v)
			}
			return b
		})
	}
	legacy := func(version, name, args string) request {
		return func(t *testing.T, sf *shortFace) (http.Header, string) {
			return legacyRequest(version, sf.initialize(t, CatalogPath, version), name, args)
		}
	}
	call := modern("7", "srv__echo", `{"a":2}`, "")
	for _, tc := range []struct {
		name  string
		path  string
		token string
		req   request
		short bool // the short path answers it
	}{
		{name: "2026-07-28 call", req: call, short: true},
		{name: "a string id", req: modern(`"abc"`, "srv__echo", `{"a":2}`, ""), short: true},
		{name: "the client's trace context in _meta", req: modern("7", "srv__echo", `{}`, `,"traceparent":"`+traceParent+`","tracestate":"k=v"`), short: true},
		{name: "structured content", req: modern("7", "srv__echo", `{"case":"structured"}`, ""), short: true},
		{name: "no arguments", req: modern("7", "srv__echo", "", ""), short: true},
		{name: "arguments null", req: modern("7", "srv__echo", "null", ""), short: true},
		{name: "arguments not an object", req: modern("7", "srv__echo", "[1]", ""), short: true},
		{name: "a tool error result", req: modern("7", "srv__echo", `{"case":"error"}`, ""), short: true},
		{name: "executor unavailable", req: modern("7", "srv__echo", `{"case":"down"}`, ""), short: true},
		{name: "tool gone meanwhile", req: modern("7", "srv__echo", `{"case":"gone"}`, ""), short: true},
		{name: "internal error", req: modern("7", "srv__echo", `{"case":"internal"}`, ""), short: true},
		{name: "unknown tool", req: modern("7", "srv__nope", `{}`, ""), short: true},
		{name: "a tool the token may not see", token: narrowToken, req: modern("7", "two__z", `{}`, ""), short: true},
		{name: "the same tool for a token that may", req: modern("7", "two__z", `{}`, ""), short: true},
		{name: "a server's view", path: ServersPath + "srv", req: modern("7", "echo", `{"a":1}`, ""), short: true},
		{name: "no Accept header", req: setHeader(call, "Accept", ""), short: true},
		{name: "Content-Type with a charset", req: setHeader(call, "Content-Type", "application/json; charset=utf-8"), short: true},
		{name: "Mcp-Name base64", req: setHeader(call, "Mcp-Name", "=?base64?"+"c3J2X19lY2hv"+"?="), short: true},

		{name: "invalid params: no client capabilities", req: edit(call, func(_ http.Header, b string) string {
			return strings.Replace(b, `"io.modelcontextprotocol/clientCapabilities":{},`, "", 1)
		})},
		{name: "wrong Mcp-Method header", req: setHeader(call, "Mcp-Method", "prompts/get")},
		{name: "no Mcp-Method header", req: setHeader(call, "Mcp-Method", "")},
		{name: "Mcp-Name not the body's", req: setHeader(call, "Mcp-Name", "srv__other")},
		{name: "no protocol version header", req: setHeader(call, "Mcp-Protocol-Version", "")},
		{name: "protocol version header not _meta's", req: setHeader(call, "Mcp-Protocol-Version", "2025-11-25")},
		{name: "an unknown protocol version", req: edit(call, func(h http.Header, b string) string {
			h.Set("Mcp-Protocol-Version", "2027-01-01")
			return strings.Replace(b, mcp.LATEST_PROTOCOL_VERSION, "2027-01-01", 1)
		})},
		{name: "Last-Event-ID", req: setHeader(call, "Last-Event-ID", "1")},
		{name: "an x-mcp-header parameter without its header", req: modern("7", "srv__hdr", `{"region":"eu"}`, "")},
		{name: "an x-mcp-header parameter with its header", req: setHeader(modern("7", "srv__hdr", `{"region":"eu"}`, ""), "Mcp-Param-Region", "eu")},
		{name: "a progress token", req: modern("7", "srv__echo", `{}`, `,"progressToken":"p1"`)},
		{name: "a field the short path does not know", req: edit(call, func(_ http.Header, b string) string {
			return strings.Replace(b, `"params":{`, `"params":{"extra":1,`, 1)
		})},
		{name: "a batch", req: edit(call, func(_ http.Header, b string) string { return "[" + b + "]" })},
		{name: "malformed", req: edit(call, func(_ http.Header, b string) string { return b[:len(b)-2] })},
		{name: "trailing text", req: edit(call, func(_ http.Header, b string) string { return b + " x" })},
		{name: "text/plain", req: setHeader(call, "Content-Type", "text/plain")},
		{name: "jsonrpc 1.0", req: edit(call, func(_ http.Header, b string) string { return strings.Replace(b, `"2.0"`, `"1.0"`, 1) })},
		{name: "a notification", req: edit(call, func(_ http.Header, b string) string { return strings.Replace(b, `"id":7,`, "", 1) })},
		{name: "a null id", req: modern("null", "srv__echo", `{}`, "")},
		{name: "_meta not an object", req: edit(call, func(_ http.Header, b string) string {
			return b[:strings.Index(b, `,"_meta"`)] + `,"_meta":5}}`
		})},

		{name: "2025-11-25 call", req: legacy("2025-11-25", "srv__echo", `{"a":2}`), short: true},
		{name: "2025-06-18 call", req: legacy("2025-06-18", "srv__echo", `{"case":"structured"}`), short: true},
		{name: "2025-11-25 unknown tool", req: legacy("2025-11-25", "srv__nope", `{}`), short: true},
		{name: "2025-11-25 internal error", req: legacy("2025-11-25", "srv__echo", `{"case":"internal"}`), short: true},
		{name: "2025-11-25 a tool the token may not see", token: narrowToken, req: legacy("2025-11-25", "two__z", `{}`), short: true},
		{name: "2025-11-25 bad session id", req: func(*testing.T, *shortFace) (http.Header, string) {
			return legacyRequest("2025-11-25", "toolmesh-nope", "srv__echo", `{}`)
		}},
		{name: "2025-11-25 no session id", req: func(*testing.T, *shortFace) (http.Header, string) {
			return legacyRequest("2025-11-25", "", "srv__echo", `{}`)
		}},
		{name: "2025-11-25 a session mcp-go has not seen here", req: func(*testing.T, *shortFace) (http.Header, string) {
			return legacyRequest("2025-11-25", statelessIDs{}.Generate(), "srv__echo", `{}`)
		}},
		{name: "2025-03-26 without the version header", req: func(t *testing.T, sf *shortFace) (http.Header, string) {
			h, b := legacyRequest("2025-03-26", sf.initialize(t, CatalogPath, "2025-03-26"), "srv__echo", `{}`)
			h.Del("Mcp-Protocol-Version")
			return h, b
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, token := cmp.Or(tc.path, CatalogPath), cmp.Or(tc.token, wideToken)
			var got [2]answer
			var spans [2][]spanView
			for i, sf := range []*shortFace{on, off} {
				h, body := tc.req(t, sf)
				sf.takeSpans() // a legacy session's initialize
				before := sf.h.face.shortCalls.Load()
				got[i] = sf.send(t, path, token, h, body)
				spans[i] = sf.takeSpans()
				if short := sf.h.face.shortCalls.Load() > before; short != (tc.short && i == 0) {
					t.Errorf("face %d: answered on the short path %v, want %v", i, short, tc.short && i == 0)
				}
			}
			if !reflect.DeepEqual(got[0], got[1]) {
				t.Errorf("short path: %+v\nmcp-go:     %+v", got[0], got[1])
			}
			if !reflect.DeepEqual(spans[0], spans[1]) {
				t.Errorf("spans on the short path: %+v\nmcp-go's: %+v", spans[0], spans[1])
			}
		})
	}
	if a, b := on.durations(t), off.durations(t); !reflect.DeepEqual(a, b) || len(a) == 0 {
		t.Errorf("mcp.server.operation.duration on the short path: %v\nmcp-go's: %v", a, b)
	}
}

// TestShortCallTakesClientsCalls: the calls of mcp-go's client take the short path in each
// protocol era, and a 2025-era session's calls go to mcp-go once in a while, so that mcp-go
// never takes a session in use for idle.
func TestShortCallTakesClientsCalls(t *testing.T) {
	h := newHarness(t, newExecutorDouble(testTool(t, "srv.echo")), harnessOptions{})
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			c := h.connect(t, CatalogPath, v, "")
			before := h.face.shortCalls.Load()
			for range 3 {
				if res, err := call(t, c, "srv__echo", map[string]any{"a": 1}); err != nil || text(res) != "ok srv.echo" {
					t.Fatalf("%q, %v", text(res), err)
				}
			}
			if n := h.face.shortCalls.Load() - before; n != 3 {
				t.Errorf("%d of 3 calls on the short path", n)
			}
			if v == mcp.LATEST_PROTOCOL_VERSION {
				return
			}
			// A quarter of --api.mcp-session-idle passes.
			clock := h.face.catalog.seen
			clock.mu.Lock()
			for id, seen := range clock.seen {
				clock.seen[id] = seen.Add(-clock.within)
			}
			clock.mu.Unlock()
			before = h.face.shortCalls.Load()
			for range 2 {
				if _, err := call(t, c, "srv__echo", nil); err != nil {
					t.Fatal(err)
				}
			}
			if n := h.face.shortCalls.Load() - before; n != 1 {
				t.Errorf("after a quarter of the idle time, %d of 2 calls on the short path, want the second", n)
			}
		})
	}
}

// TestSessionClockBounded: the clock keeps at most its bound, forgets stale sessions first and
// says a session is fresh only within its time.
func TestSessionClockBounded(t *testing.T) {
	c := newSessionClock(8, time.Minute)
	now := time.Now()
	c.saw("old", now.Add(-2*time.Minute))
	for i := range 20 {
		c.saw(fmt.Sprint(i), now)
	}
	if len(c.seen) > 8 {
		t.Errorf("%d sessions kept, want at most 8", len(c.seen))
	}
	if _, ok := c.seen["old"]; ok {
		t.Error("a stale session was kept")
	}
	if !c.fresh("19", now.Add(59*time.Second)) || c.fresh("19", now.Add(time.Minute)) || c.fresh("nope", now) {
		t.Error("fresh: want the last one seen, within a minute only")
	}
}

// FuzzShortCall: any body and headers either get the short path's answer, the same as mcp-go's
// (status, Content-Type, decoded body), or go to mcp-go untouched; nothing panics.
func FuzzShortCall(f *testing.F) {
	// Made with f: a harness made in the fuzz function would end with its first input.
	on := newHarness(f, newExecutorDouble(testTool(f, "srv.echo")), harnessOptions{})
	off := newHarness(f, newExecutorDouble(testTool(f, "srv.echo")), harnessOptions{cfg: Config{noShortPath: true}})
	for _, h := range []*harness{on, off} {
		h.face.tools = cannedTools{resp: &toolmeshv1.CallToolResponse{Content: []*toolmeshv1.Content{{Type: "text", Text: proto.String("5")}}}}
	}
	for _, b := range []string{"", "{}", "[]", "null", `{"jsonrpc":"2.0","id":1,"method":"tools/call"}`} {
		f.Add(b, "tools/call", "srv__echo", mcp.LATEST_PROTOCOL_VERSION)
	}
	for _, args := range []string{`{"a":1}`, `[1]`, `null`, `{"case":"error"}`} {
		_, b := modernRequest("1", "srv__echo", args, "")
		f.Add(b, "tools/call", "srv__echo", mcp.LATEST_PROTOCOL_VERSION)
	}
	_, b := modernRequest(`"x"`, "srv__nope", "", `,"traceparent":"`+traceParent+`"`)
	f.Add(b, "tools/call", "srv__nope", mcp.LATEST_PROTOCOL_VERSION)
	_, b = legacyRequest("2025-11-25", "", "srv__echo", `{}`)
	f.Add(b, "", "", "2025-11-25")
	f.Fuzz(func(t *testing.T, body, method, name, version string) {
		send := func(h *harness) *httptest.ResponseRecorder {
			r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1"+CatalogPath, bytes.NewReader([]byte(body)))
			r.Header = jsonHeader()
			for k, v := range map[string]string{"Mcp-Method": method, "Mcp-Name": name, "Mcp-Protocol-Version": version} {
				if v != "" && !strings.ContainsAny(v, "\r\n\x00") {
					r.Header.Set(k, v)
				}
			}
			// Bounded: a request mcp-go holds open (subscriptions/listen) ends with its context.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			w := httptest.NewRecorder()
			h.face.ServeHTTP(w, r.WithContext(ctx))
			return w
		}
		before := on.face.shortCalls.Load()
		a := send(on)
		if on.face.shortCalls.Load() == before {
			return // mcp-go answered, as it does without the short path
		}
		b := send(off)
		var av, bv any
		if a.Code != b.Code || a.Header().Get("Content-Type") != b.Header().Get("Content-Type") ||
			json.Unmarshal(a.Body.Bytes(), &av) != nil || json.Unmarshal(b.Body.Bytes(), &bv) != nil || !reflect.DeepEqual(av, bv) {
			t.Errorf("body %q: short path %d %s, mcp-go %d %s", body, a.Code, a.Body, b.Code, b.Body)
		}
	})
}

// TestShortCallCancel: a 2025-era session's notifications/cancelled cancels its call on the
// short path, as mcp-go cancels the calls it runs. (That another client's does not, in either
// era: TestCancelIsTheCallersOwn.)
func TestShortCallCancel(t *testing.T) {
	sf := newShortFace(t, true)
	canceled := sf.blockCalls()
	defer sf.release()
	session := sf.initialize(t, CatalogPath, "2025-11-25")
	h, body := legacyRequest("2025-11-25", session, "srv__echo", `{}`)
	before := sf.h.face.shortCalls.Load()
	done := sf.startCall(t, t.Context(), CatalogPath, wideToken, h, body)
	nh, nbody := cancelledNotification(h, "3")
	if a := sf.send(t, CatalogPath, wideToken, nh, nbody); a.Status != http.StatusAccepted {
		t.Errorf("notifications/cancelled: %d %v", a.Status, a.Body)
	}
	select {
	case <-canceled:
	case <-time.After(5 * time.Second):
		t.Fatal("the session's notifications/cancelled did not cancel its call")
	}
	<-done
	if sf.h.face.shortCalls.Load() == before {
		t.Error("the call did not take the short path")
	}
}
