package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolmesh/toolmesh/internal/eventually"
)

// modernPost posts a JSON-RPC message of protocol 2026-07-28 to an MCP endpoint with token, as
// a client on that protocol sends it: method, id ("" for a notification), the tool's name ("" for
// none), params' fields without _meta, and more _meta (",KEY:VALUE..."). It returns the status and
// body, or the error of a request whose ctx ended.
func modernPost(ctx context.Context, url, token, method, id, name, params, meta string) (int, string, error) {
	if id != "" {
		id = `"id":` + id + `,`
	}
	body := fmt.Sprintf(`{"jsonrpc":"2.0",%s"method":%q,"params":{%s,"_meta":{"io.modelcontextprotocol/protocolVersion":%q,`+
		`"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"t","version":"0"}%s}}}`,
		id, method, params, mcp.LATEST_PROTOCOL_VERSION, meta)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Protocol-Version", mcp.LATEST_PROTOCOL_VERSION)
	req.Header.Set("Mcp-Method", method)
	if name != "" {
		req.Header.Set("Mcp-Name", name)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestAttackMCPCancelOtherClient: at protocol 2026-07-28 a call has no session, and mcp-go keyed
// the calls it runs (one with a progress token, here) by request id alone, so another token's
// notifications/cancelled naming the same id cancelled the call at the MCP server. Now the
// face drops a 2026-07-28 notifications/cancelled (202): the call answers, the server never sees
// a cancel; and the client closing its own response still cancels the call at the server.
func TestAttackMCPCancelOtherClient(t *testing.T) {
	const (
		owner = "owner-token-0123456789abcdef"
		other = "other-token-0123456789abcdef"
	)
	t.Setenv("TOOLMESH_API_TOKENS", "owner:"+owner+",other:"+other)
	m, w := startWaiterMesh(t, owner)
	url := m.base + "/mcp"
	waitMCPTools(t, url, owner, "slow__wait")

	call := func(ctx context.Context, ms int) chan string {
		done := make(chan string, 1)
		before := w.started.Load()
		go func() {
			code, body, err := modernPost(ctx, url, owner, "tools/call", "1", "slow__wait",
				fmt.Sprintf(`"name":"slow__wait","arguments":{"ms":%d}`, ms), `,"progressToken":"p"`)
			done <- fmt.Sprintf("%d %s %v", code, body, err)
		}()
		eventually.True(t, 10*time.Second, "the call reached the MCP server", func() bool { return w.started.Load() > before })
		return done
	}

	t.Run("another token's notifications/cancelled", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		done := call(ctx, 1500)
		code, body, err := modernPost(ctx, url, other, "notifications/cancelled", "", "", `"requestId":1`, "")
		if err != nil || code != http.StatusAccepted {
			t.Errorf("the other token's notifications/cancelled: %d %s %v, want 202", code, body, err)
		}
		got := <-done
		if !strings.HasPrefix(got, "200 ") || !strings.Contains(got, "waited") || strings.Contains(got, `"isError":true`) {
			t.Errorf("the call: %s; want its result, waited", got)
		}
		if n := w.cancelled.Load(); n != 0 {
			t.Errorf("the MCP server saw %d calls cancelled, want 0", n)
		}
	})

	t.Run("the client closes its response", func(t *testing.T) {
		before := w.cancelled.Load()
		ctx, cancel := context.WithCancel(t.Context())
		done := call(ctx, 30000)
		cancel()
		<-done
		eventually.True(t, 10*time.Second, "the MCP server's call cancelled", func() bool { return w.cancelled.Load() == before+1 })
	})
}
