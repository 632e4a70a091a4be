package mcpface

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"google.golang.org/protobuf/proto"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// cannedTools is a double of the api's tools handler that answers every call at once with
// resp: what the benchmark measures is the face's own work around it.
type cannedTools struct{ resp *toolmeshv1.CallToolResponse }

func (c cannedTools) CallToolProgress(context.Context, *toolmeshv1.CallToolRequest, func(*toolmeshv1.CallProgress)) (*toolmeshv1.CallToolResponse, error) {
	return c.resp, nil
}

func (cannedTools) SearchTools(context.Context, *toolmeshv1.SearchToolsRequest) (*toolmeshv1.SearchToolsResponse, error) {
	return &toolmeshv1.SearchToolsResponse{}, nil
}

// cpuTime is the CPU time this process has used, user and system: on a shared machine the
// CPU per call is steadier than the wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// recordedRequest is an HTTP request as a client sent it, to send again.
type recordedRequest struct {
	header http.Header
	body   []byte
}

// recordCall makes one tools/call of tool with args at version through an mcp-go client and
// returns the POST that carried it, as the client wrote it.
func recordCall(t testing.TB, f *Face, version, tool string, args any) recordedRequest {
	t.Helper()
	var mu sync.Mutex
	var got recordedRequest
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			if bytes.Contains(body, []byte(`"tools/call"`)) {
				mu.Lock()
				got = recordedRequest{header: r.Header.Clone(), body: body}
				mu.Unlock()
			}
		}
		f.ServeHTTP(w, r)
	}))
	defer ts.Close()
	tr, err := transport.NewStreamableHTTP(ts.URL + CatalogPath)
	if err != nil {
		t.Fatal(err)
	}
	c := client.NewClient(tr, client.WithProtocolVersion(version))
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = version
	init.Params.ClientInfo = mcp.Implementation{Name: "mcpface-bench", Version: "0"}
	if _, err := c.Initialize(context.Background(), init); err != nil {
		t.Fatal(err)
	}
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = tool, args
	if _, err := c.CallTool(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got.body == nil {
		t.Fatal("no tools/call was recorded")
	}
	return got
}

// BenchmarkCall is the face's own work for one tools/call on /mcp: the request as an mcp-go
// client sends it, handed to the face and answered, against a tools handler that answers at
// once. "short" is the face's short path for tools/call (shortcall.go: its checks, the hooks'
// span and metric, the policy's filter, the handler); "mcp-go" the same request through mcp-go's
// streamable HTTP server, as every call went before it. Its ns/op on one goroutine is the face's
// CPU per call (issue 28: under 20 µs).
func BenchmarkCall(b *testing.B) {
	canned := cannedTools{resp: &toolmeshv1.CallToolResponse{
		Content:               []*toolmeshv1.Content{{Type: "text", Text: proto.String("5")}},
		StructuredContentJson: []byte(`{"sum":5}`),
	}}
	h := newHarness(b, newExecutorDouble(testTool(b, "srv.echo")), harnessOptions{})
	h.face.tools = canned
	// The face's own code alone: what its hooks and the tool's handler do for one call, with
	// the request as mcp-go decoded it (arguments kept as text).
	b.Run("own-code", func(b *testing.B) {
		b.ReportAllocs()
		handler := h.face.callHandler("srv.echo")
		req := mcp.CallToolRequest{}
		req.Params.Name = "srv__echo"
		req.Params.Arguments = map[string]any{"a": 2.0, "b": 3.0}
		req.Params.RawArguments = []byte(`{"a":2,"b":3}`)
		ctx := withPeer(context.Background(), httptest.NewRequest(http.MethodPost, "http://127.0.0.1"+CatalogPath, nil))
		start := cpuTime()
		defer func() { b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/op") }()
		for b.Loop() {
			cctx, cancel := context.WithCancel(ctx) // mcp-go gives each request a context of its own
			h.face.ins.begin(cctx, CatalogPath, 1, mcp.MethodToolsCall, &req)
			res, err := handler(cctx, req)
			h.face.ins.end(cctx, res, err)
			cancel()
			if err != nil || len(res.RawStructuredContent) == 0 {
				b.Fatalf("%v, %v", res, err)
			}
		}
	})
	viaMCPGo := newHarness(b, newExecutorDouble(testTool(b, "srv.echo")), harnessOptions{cfg: Config{noShortPath: true}})
	viaMCPGo.face.tools = canned
	for _, path := range []struct {
		name string
		h    *harness
	}{{"short", h}, {"mcp-go", viaMCPGo}} {
		for _, version := range []string{mcp.LATEST_PROTOCOL_VERSION, "2025-11-25"} {
			rec := recordCall(b, path.h.face, version, "srv__echo", map[string]any{"a": 2, "b": 3})
			// The request is made once, as net/http makes it for either path; each call gets its
			// body anew.
			base := httptest.NewRequest(http.MethodPost, "http://127.0.0.1"+CatalogPath, nil)
			base.Header = rec.header
			b.Run(path.name+"/"+version, func(b *testing.B) {
				b.ReportAllocs()
				before := path.h.face.shortCalls.Load()
				start := cpuTime()
				defer func() { b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/op") }()
				for b.Loop() {
					r := *base
					r.Body = io.NopCloser(bytes.NewReader(rec.body))
					w := httptest.NewRecorder()
					path.h.face.ServeHTTP(w, &r)
					if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"sum":5`) {
						b.Fatalf("status %d: %s", w.Code, w.Body)
					}
				}
				if short := path.h.face.shortCalls.Load() > before; short != (path.name == "short") {
					b.Fatalf("answered on the short path: %v", short)
				}
			})
		}
	}
}
