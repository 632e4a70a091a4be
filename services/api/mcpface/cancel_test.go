package mcpface

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolmesh/toolmesh/internal/eventually"
)

// blockCalls makes the tools double hold every call until release, and returns the channel
// closed when a held call's context ends (it was cancelled).
func (sf *shortFace) blockCalls() chan struct{} {
	sf.h.tools.mu.Lock()
	defer sf.h.tools.mu.Unlock()
	sf.h.tools.block, sf.h.tools.canceled, sf.h.tools.calls = make(chan struct{}), make(chan struct{}), nil
	return sf.h.tools.canceled
}

// release lets the held calls answer.
func (sf *shortFace) release() {
	sf.h.tools.mu.Lock()
	defer sf.h.tools.mu.Unlock()
	close(sf.h.tools.block)
}

// startCall sends a call with ctx and returns once the tools double has it; the channel gets
// its answer (or a zero answer when the request failed, as a closed one does).
func (sf *shortFace) startCall(t *testing.T, ctx context.Context, path, token string, h http.Header, body string) chan answer {
	t.Helper()
	done := make(chan answer, 1)
	go func() {
		a, _ := sf.sendContext(ctx, path, token, h, body)
		done <- a
	}()
	eventually.True(t, 5*time.Second, "the call reached the tools handler", func() bool {
		req, _ := sf.h.tools.lastCall()
		return req != nil
	})
	return done
}

// cancelledNotification is a notifications/cancelled for requestID with h's protocol version
// and session, as a client sends it (at 2026-07-28 with the version in _meta and Mcp-Method).
func cancelledNotification(h http.Header, requestID string) (http.Header, string) {
	h = h.Clone()
	h.Set("Mcp-Method", "notifications/cancelled")
	h.Del("Mcp-Name")
	meta := ""
	if h.Get("Mcp-Protocol-Version") == mcp.LATEST_PROTOCOL_VERSION {
		meta = `,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	}
	return h, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + requestID + meta + `}}`
}

// withProgress is a 2025-era tools/call of session with id 1 and a progress token (so mcp-go
// runs it, not the short path).
func withProgress(version, session, name string) (http.Header, string) {
	h, _ := legacyRequest(version, session, name, "")
	return h, fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":%q,"arguments":{},"_meta":{"progressToken":"p1"}}}`, name)
}

// TestCancelIsTheCallersOwn: a client's notifications/cancelled never cancels another client's
// call that happens to have the same request id (every client counts from 0 or 1). At
// 2026-07-28 there is no session: mcp-go keyed its calls (those with a progress token, call_tool
// on /mcp/search, anything not on the short path) by the request id alone, so another token's
// notification, or another client's of the same token, cancelled them. The 2025-era sessions key
// by session, as the legacy SSE transport does.
func TestCancelIsTheCallersOwn(t *testing.T) {
	sf := newShortFace(t, true)
	// modernCall is the first client's call at 2026-07-28 (see modernRequest).
	modernCall := func(id, name, args, meta string) func(*testing.T) (http.Header, string) {
		return func(*testing.T) (http.Header, string) { return modernRequest(id, name, args, meta) }
	}
	// otherModern is the second client's notifications/cancelled at 2026-07-28.
	otherModern := func(requestID string) func(*testing.T) (http.Header, string) {
		return func(*testing.T) (http.Header, string) {
			h, _ := modernRequest("1", "", "", "")
			return cancelledNotification(h, requestID)
		}
	}
	cases := []struct {
		name string
		path string
		// call is the first client's call, request id 1, sent with the wide token.
		call func(t *testing.T) (http.Header, string)
		// other is the second client's token and its notifications/cancelled for request id 1.
		other      string
		notify     func(t *testing.T) (http.Header, string)
		wantStatus int // the second client's answer: an accepted notification is 202, no body
		short      bool
	}{
		{
			name: "2026-07-28 progress token, another token", path: CatalogPath,
			call:  modernCall("1", "srv__echo", `{}`, `,"progressToken":"p1"`),
			other: narrowToken, wantStatus: http.StatusAccepted,
			notify: otherModern("1"),
		},
		{
			name: "2026-07-28 progress token, the same token from another client", path: CatalogPath,
			call:  modernCall("1", "srv__echo", `{}`, `,"progressToken":"p1"`),
			other: wideToken, wantStatus: http.StatusAccepted,
			notify: otherModern("1"),
		},
		{
			name: "2026-07-28 string id", path: CatalogPath,
			call:  modernCall(`"a"`, "srv__echo", `{}`, `,"progressToken":"p1"`),
			other: narrowToken, wantStatus: http.StatusAccepted,
			notify: otherModern(`"a"`),
		},
		{
			name: "2026-07-28 server view", path: ServersPath + "srv",
			call:  modernCall("1", "echo", `{}`, `,"progressToken":"p1"`),
			other: narrowToken, wantStatus: http.StatusAccepted,
			notify: otherModern("1"),
		},
		{
			name: "2026-07-28 call_tool on the search view", path: SearchPath,
			call:  modernCall("1", callToolName, `{"tool":"srv.echo","arguments":{}}`, ""),
			other: narrowToken, wantStatus: http.StatusAccepted,
			notify: otherModern("1"),
		},
		{
			name: "2026-07-28 short path", path: CatalogPath, short: true,
			call:  modernCall("1", "srv__echo", `{}`, ""),
			other: narrowToken, wantStatus: http.StatusAccepted,
			notify: otherModern("1"),
		},
		{
			// mcp-go refuses a 2026-07-28 message without the version in _meta before it
			// handles it: its answer stands, and it cancels nothing.
			name: "2026-07-28 notification without _meta", path: CatalogPath,
			call:  modernCall("1", "srv__echo", `{}`, `,"progressToken":"p1"`),
			other: narrowToken, wantStatus: http.StatusBadRequest,
			notify: func(t *testing.T) (http.Header, string) {
				h, _ := otherModern("1")(t)
				return h, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`
			},
		},
		{
			name: "2025-11-25 progress token, another session", path: CatalogPath,
			call: func(t *testing.T) (http.Header, string) {
				return withProgress("2025-11-25", sf.initialize(t, CatalogPath, "2025-11-25"), "srv__echo")
			},
			other: wideToken, wantStatus: http.StatusAccepted,
			notify: func(t *testing.T) (http.Header, string) {
				h, _ := legacyRequest("2025-11-25", sf.initialize(t, CatalogPath, "2025-11-25"), "", "")
				return cancelledNotification(h, "1")
			},
		},
		{
			name: "2025-11-25 short path, another session", path: CatalogPath, short: true,
			call: func(t *testing.T) (http.Header, string) {
				h, _ := legacyRequest("2025-11-25", sf.initialize(t, CatalogPath, "2025-11-25"), "srv__echo", "")
				return h, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"srv__echo","arguments":{}}}`
			},
			other: wideToken, wantStatus: http.StatusAccepted,
			notify: func(t *testing.T) (http.Header, string) {
				h, _ := legacyRequest("2025-11-25", sf.initialize(t, CatalogPath, "2025-11-25"), "", "")
				return cancelledNotification(h, "1")
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			canceled := sf.blockCalls()
			h, body := tc.call(t)
			nh, nbody := tc.notify(t)
			before := sf.h.face.shortCalls.Load()
			done := sf.startCall(t, t.Context(), tc.path, wideToken, h, body)
			a := sf.send(t, tc.path, tc.other, nh, nbody)
			if a.Status != tc.wantStatus || tc.wantStatus == http.StatusAccepted && (a.Body != "" || a.ContentType != "") {
				t.Errorf("the other client's notifications/cancelled: %d %q %v; want %d (202: no body)", a.Status, a.ContentType, a.Body, tc.wantStatus)
			}
			select {
			case <-canceled:
				t.Error("another client's notifications/cancelled naming the call's request id cancelled it")
			case <-time.After(200 * time.Millisecond):
			}
			sf.release()
			got := <-done
			if got.Status != http.StatusOK || !strings.Contains(fmt.Sprint(got.Body), "ok srv.echo") || strings.Contains(fmt.Sprint(got.Body), "isError:true") {
				t.Errorf("the call: %d %v; want its result", got.Status, got.Body)
			}
			if short := sf.h.face.shortCalls.Load() > before; short != tc.short {
				t.Errorf("the call took the short path: %v, want %v", short, tc.short)
			}
		})
	}

	t.Run("legacy SSE, another session", func(t *testing.T) {
		canceled := sf.blockCalls()
		a, b := openSSE(t, sf.h.url, wideToken), openSSE(t, sf.h.url, wideToken)
		a.initialize(t)
		b.initialize(t)
		if code, body, err := postMessage(a.endpoint, wideToken, callBody("1", "srv__echo")); err != nil || code != http.StatusAccepted {
			t.Fatalf("the call: %d %s %v, want 202", code, body, err)
		}
		eventually.True(t, 5*time.Second, "the call reached the tools handler", func() bool {
			req, _ := sf.h.tools.lastCall()
			return req != nil
		})
		cancel := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`
		if code, body, err := postMessage(b.endpoint, wideToken, cancel); err != nil || code != http.StatusAccepted {
			t.Errorf("the other session's notifications/cancelled: %d %s %v, want 202", code, body, err)
		}
		select {
		case <-canceled:
			t.Error("another session's notifications/cancelled naming the call's request id cancelled it")
		case <-time.After(200 * time.Millisecond):
		}
		sf.release()
		a.waitResults(t, 1, 5*time.Second)
	})
}

// TestCancelByClosingTheResponse: at 2026-07-28 a client cancels a call by closing its
// response (the spec's cancellation over streamable HTTP), on the short path and through mcp-go
// alike; the call's context in the tools handler ends, which the executor turns into the
// upstream server's cancel.
func TestCancelByClosingTheResponse(t *testing.T) {
	sf := newShortFace(t, true)
	cases := []struct {
		name, path string
		call       func() (http.Header, string)
	}{
		{"progress token (mcp-go)", CatalogPath, func() (http.Header, string) {
			return modernRequest("1", "srv__echo", `{}`, `,"progressToken":"p1"`)
		}},
		{"short path", CatalogPath, func() (http.Header, string) { return modernRequest("1", "srv__echo", `{}`, "") }},
		{"call_tool on the search view (mcp-go)", SearchPath, func() (http.Header, string) {
			return modernRequest("1", callToolName, `{"tool":"srv.echo","arguments":{}}`, "")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			canceled := sf.blockCalls()
			defer sf.release()
			ctx, cancel := context.WithCancel(t.Context())
			h, body := tc.call()
			done := sf.startCall(t, ctx, tc.path, wideToken, h, body)
			cancel()
			select {
			case <-canceled:
			case <-time.After(5 * time.Second):
				t.Fatal("closing the call's response did not end its context in the tools handler within 5 s")
			}
			<-done
		})
	}
}

// TestDroppedCancelAnswersAsMCPGo: the face answers each notifications/cancelled as the view's
// own mcp-go server answers it (with no call in flight, where dropping it changes nothing): 202
// and no body for one it takes, and mcp-go's refusal for one it refuses, which the face leaves
// to mcp-go.
func TestDroppedCancelAnswersAsMCPGo(t *testing.T) {
	sf := newShortFace(t, true)
	valid := func() (http.Header, string) {
		h, _ := modernRequest("1", "", "", "")
		return cancelledNotification(h, "1")
	}
	edit := func(fn func(h http.Header, body string) string) func() (http.Header, string) {
		return func() (http.Header, string) {
			h, b := valid()
			return h, fn(h, b)
		}
	}
	cases := []struct {
		name    string
		request func() (http.Header, string)
		dropped bool // the face answers it itself
	}{
		{"valid", valid, true},
		{"null id", edit(func(_ http.Header, b string) string {
			return strings.Replace(b, `"jsonrpc":"2.0",`, `"jsonrpc":"2.0","id":null,`, 1)
		}), true},
		{"no Mcp-Method", edit(func(h http.Header, b string) string { h.Del("Mcp-Method"); return b }), true},
		{"no requestId", edit(func(_ http.Header, b string) string { return strings.Replace(b, `"requestId":1,`, "", 1) }), true},
		{"version only in _meta", edit(func(h http.Header, b string) string { h.Del("Mcp-Protocol-Version"); return b }), false},
		{"version only in the header", edit(func(_ http.Header, b string) string {
			return `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`
		}), false},
		{"header and _meta differ", edit(func(h http.Header, b string) string { h.Set("Mcp-Protocol-Version", "2025-11-25"); return b }), false},
		{"unknown version", edit(func(h http.Header, b string) string {
			h.Set("Mcp-Protocol-Version", "2099-01-01")
			return strings.Replace(b, mcp.LATEST_PROTOCOL_VERSION, "2099-01-01", 1)
		}), false},
		{"Last-Event-ID", edit(func(h http.Header, b string) string { h.Set("Last-Event-ID", "1"); return b }), false},
		{"JSON-RPC 1.0", edit(func(_ http.Header, b string) string { return strings.Replace(b, `"2.0"`, `"1.0"`, 1) }), false},
		{"text/plain", edit(func(h http.Header, b string) string { h.Set("Content-Type", "text/plain"); return b }), false},
		{"with an id: a request", edit(func(_ http.Header, b string) string {
			return strings.Replace(b, `"jsonrpc":"2.0",`, `"jsonrpc":"2.0","id":5,`, 1)
		}), false},
		{"2025 era", func() (http.Header, string) {
			h, _ := legacyRequest("2025-11-25", sf.initialize(t, CatalogPath, "2025-11-25"), "", "")
			return cancelledNotification(h, "1")
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, body := tc.request()
			req := httptest.NewRequest(http.MethodPost, CatalogPath, strings.NewReader(body))
			req.Header = h.Clone()
			rec := httptest.NewRecorder()
			sf.h.face.catalog.http.ServeHTTP(rec, req)
			want := answer{Status: rec.Code, ContentType: rec.Header().Get("Content-Type"), Body: rec.Body.String()}
			var v any
			if json.Unmarshal(rec.Body.Bytes(), &v) == nil {
				want.Body = v
			}
			got := sf.send(t, CatalogPath, wideToken, h, body)
			got.SessionID = ""
			if !reflect.DeepEqual(got, want) {
				t.Errorf("the face answered %+v, mcp-go %+v", got, want)
			}
			r := httptest.NewRequest(http.MethodPost, CatalogPath, nil)
			r.Header = h
			if dropped := sf.h.face.dropCancelled(httptest.NewRecorder(), r, []byte(body)); dropped != tc.dropped {
				t.Errorf("dropped by the face: %v, want %v", dropped, tc.dropped)
			}
		})
	}
}
