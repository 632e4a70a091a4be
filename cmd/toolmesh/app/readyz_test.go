package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadyzServerDown is issue 26's readiness attack: one MCP server that never answers used
// to hold /readyz at 503, and with it every api pod out of its Service (the Helm chart's
// readiness probe). Now the mesh is ready with the server down, and says which one to those
// who may know: each token reads only the servers it may list, in /readyz and /v1/servers,
// and /metrics counts the server's session by state.
func TestReadyzServerDown(t *testing.T) {
	const root, calc, probe = "root-token-0123456789abcdef", "calc-token-0123456789abcdef", "probe-token-0123456789abcdef"
	t.Setenv("TOOLMESH_API_TOKENS", "root:"+root+",calc:"+calc+",probe:"+probe)
	cfg := filepath.Join(t.TempDir(), "toolmesh.yaml")
	// Port 1 refuses at once: the server's first connection fails and it stays down.
	doc := `mcpServers:
  broken:
    url: http://127.0.0.1:1/mcp
policy:
  tokens:
    root: {call: ["*"], query: true}
    calc: {call: [calculator]}
`
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	// startMeshToken waits for /readyz 200: before the fix it never came. Without the grace a
	// server gets at start, the server is down from the first check.
	m := startMeshToken(t, probe, "--config="+cfg, "--api.ready-server-grace=0s")

	cases := []struct {
		name, token, path string
		code              int
		want, notWant     []string
	}{
		{name: "ready with a server down, naming it", token: root, path: "/readyz", code: 200,
			want: []string{`"status":"ready"`, `"ready":3`, `"name":"broken"`, "SERVER_STATE_UNHEALTHY", "127.0.0.1:1"}},
		{name: "a narrow token reads only its servers", token: calc, path: "/readyz", code: 200,
			want: []string{`"status":"ready"`, `"ready":1`, `"not_connected":[]`}, notWant: []string{"broken", "127.0.0.1:1", "sqlite", "converter"}},
		{name: "a token without a scope reads none", token: probe, path: "/readyz", code: 200,
			want: []string{`"status":"ready"`, `"ready":0`}, notWant: []string{"broken", "calculator"}},
		{name: "no token, no answer", path: "/readyz", code: 401, notWant: []string{"broken"}},
		{name: "/v1/servers says the server is down", token: root, path: "/v1/servers", code: 200,
			want: []string{`"name":"broken"`, "SERVER_STATE_UNHEALTHY"}},
		{name: "and not to a narrow token", token: calc, path: "/v1/servers", code: 200,
			want: []string{`"calculator"`}, notWant: []string{"broken"}},
		{name: "/metrics counts its session by state", token: root, path: "/metrics", code: 200,
			want: []string{`toolmesh_mcp_server="broken"`, `toolmesh_mcp_session_state="unhealthy"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, b := do(t, tc.token, "GET", m.base+tc.path, "")
			if code != tc.code {
				t.Errorf("GET %s: %d %.600s; want %d", tc.path, code, b, tc.code)
			}
			if tc.path == "/metrics" {
				b = []byte(sessionLines(string(b)))
			}
			for _, w := range tc.want {
				if !strings.Contains(string(b), w) {
					t.Errorf("GET %s: %.600s; want it to contain %s", tc.path, b, w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(string(b), w) {
					t.Errorf("GET %s: %.600s; want no %s", tc.path, b, w)
				}
			}
		})
	}
}

// sessionLines is the toolmesh_mcp_sessions lines of a Prometheus text.
func sessionLines(text string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "toolmesh_mcp_sessions{") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
