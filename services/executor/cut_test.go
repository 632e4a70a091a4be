package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/fdcheck"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
)

// watchedCall makes a call while a goroutine watches the process's heap: past budget bytes
// above where it started, the call is cancelled and the test fails at once, so a result read
// whole (50 MiB, decoded to several times that) cannot take the machine with it. It returns
// the response, the call's trailer and the highest heap it saw above the start.
func watchedCall(t *testing.T, h *executorHarness, id string, args map[string]any, budget uint64) (*toolmeshv1.ExecutorServiceCallToolResponse, metadata.MD, uint64, error) {
	t.Helper()
	st, err := structpb.NewStruct(args)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	base := m.HeapInuse
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var peak uint64
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapInuse > base {
				peak = max(peak, m.HeapInuse-base)
			}
			if peak > budget {
				t.Errorf("%s: the heap grew by %d MiB, more than the %d MiB allowed: the call was stopped", id, peak>>20, budget>>20)
				cancel()
				return
			}
		}
	})
	var trailer metadata.MD
	resp, err := h.client.CallTool(ctx, &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: id, Arguments: st}, grpc.Trailer(&trailer))
	close(done)
	wg.Wait()
	return resp, trailer, peak, err
}

// sizedText is streamedText with a Content-Length.
func sizedText(n int) fault {
	return func(w http.ResponseWriter, _ *http.Request, msg rpcMessage) {
		head := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"`, msg.ID)
		tail := `"}]}}`
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(head)+n+len(tail)))
		w.WriteHeader(http.StatusOK)
		if _, err := io.WriteString(w, head); err != nil {
			return
		}
		chunk := []byte(strings.Repeat("y", 32<<10))
		for left := n; left > 0; left -= len(chunk) {
			if _, err := w.Write(chunk[:min(left, len(chunk))]); err != nil {
				return
			}
		}
		_, _ = io.WriteString(w, tail)
	}
}

// addNumbersTool adds "numbers", whose result is small in JSON ("0," each) and large in
// structpb (11 bytes each): n zeros as structured content.
func addNumbersTool(ts *testMCP) {
	ts.srv.AddTool(mcp.NewTool("numbers", mcp.WithNumber("n", mcp.Required())), func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		n, _ := r.RequireFloat("n")
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent("zeros")},
			StructuredContent: map[string]any{"zeros": make([]int, int(n))}}, nil
	})
}

// TestResultCut: a result over its tool's limit (tools.TOOL.maxResultBytes, else the server's
// maxResultBytes, else executor.max-result-bytes) is cut to it, ends with a marker block saying
// so, and carries the CutTrailer; 50 MiB from the server costs the executor about the limit, not
// the answer; a result under the limit is untouched; the server stays connected and working.
func TestResultCut(t *testing.T) {
	fdcheck.Check(t, 2)
	const serverLimit, toolLimit = 256 << 10, 64 << 10
	p := newFaultProxy()
	ts := newTestMCP("big", 0)
	addNumbersTool(ts)
	hh := newHTTPHarness(t, p.wrap(streamableHandler(fixed(ts))))
	h := startExecutor(t, Config{MaxResultBytes: 1 << 20, Servers: map[string]mcpconfig.Server{
		"big": {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://" + hh.addr + "/mcp",
			MaxResultBytes: serverLimit, Tools: map[string]mcpconfig.ToolSettings{"whoami": {MaxResultBytes: toolLimit}}},
	}})
	h.waitReady(t)
	envelope := len(`{"jsonrpc":"2.0","id":123,"result":{"content":[{"type":"text","text":""}]}}`)

	cases := []struct {
		name   string
		tool   string
		args   map[string]any
		answer fault
		limit  int // 0: not cut
		marker []string
	}{
		{"50 MiB of text, the server's limit", "pid", nil, streamedText(50<<20, false), serverLimit,
			[]string{"the tool answered more than 262144 bytes, over the 262144-byte limit (maxResultBytes of server \"big\")"}},
		{"50 MiB in an event stream, the tool's limit", "whoami", nil, streamedText(50<<20, true), toolLimit,
			[]string{"over the 65536-byte limit (tools.whoami.maxResultBytes of server \"big\")"}},
		{"50 MiB with its Content-Length", "pid", nil, sizedText(50 << 20), serverLimit,
			[]string{fmt.Sprintf("the tool answered %d", (50<<20+envelope)/100)}},
		{"small JSON, large gRPC response", "numbers", map[string]any{"n": 100000}, nil, serverLimit,
			[]string{"over the 262144-byte limit", "left out: structured content"}},
		{"just under the limit", "whoami", nil, streamedText(toolLimit-envelope-64, false), 0, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := "tools/call:" + tc.tool
			p.set(key, tc.answer)
			defer p.set(key, nil)
			args := tc.args
			if args == nil {
				args = map[string]any{}
			}
			start := time.Now()
			r, trailer, peak, err := watchedCall(t, h, "big."+tc.tool, args, 48<<20)
			t.Logf("took %s, heap grew by at most %d KiB", time.Since(start).Round(time.Millisecond), peak>>10)
			if err != nil {
				t.Fatalf("call: %v; want a result", err)
			}
			content := r.GetContent()
			last := content[len(content)-1].GetText()
			if tc.limit == 0 {
				if strings.HasPrefix(last, CutMarker) || len(trailer.Get(CutTrailer)) > 0 {
					t.Errorf("a result under the limit was marked cut: %q, trailer %v", last, trailer)
				}
				return
			}
			if !strings.HasPrefix(last, CutMarker) {
				t.Fatalf("last block %.200q; want the marker", last)
			}
			for _, want := range tc.marker {
				if !strings.Contains(last, want) {
					t.Errorf("marker %q does not say %q", last, want)
				}
			}
			if got := trailer.Get(CutTrailer); len(got) != 1 || got[0] != strconv.Itoa(tc.limit) {
				t.Errorf("trailer %s = %v; want [%d]", CutTrailer, got, tc.limit)
			}
			if n := proto.Size(r); n > tc.limit+markerBytes {
				t.Errorf("the cut result is %d bytes; want at most the limit %d and the marker", n, tc.limit)
			}
			if tc.answer != nil && (len(content) != 2 || len(content[0].GetText()) < tc.limit/2) {
				t.Errorf("got %d blocks, the first of %d bytes; want the text cut near the limit, then the marker", len(content), len(content[0].GetText()))
			}
			if r, err := call(t, h, "big.add", map[string]any{"a": 1, "b": 2}); err != nil || text(r) != "3" {
				t.Fatalf("after a cut result: %v %v", r, err)
			}
			if s := serverState(t, h, "big"); s.GetState() != toolmeshv1.ServerState_SERVER_STATE_READY {
				t.Errorf("state %v (%s), want READY", s.GetState(), s.GetLastError())
			}
		})
	}
	t.Run("an error answer over the limit is refused", func(t *testing.T) {
		p.set("tools/call:pid", func(w http.ResponseWriter, _ *http.Request, msg rpcMessage) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32603,"message":"%s"}}`, msg.ID, strings.Repeat("e", 1<<20))
		})
		defer p.set("tools/call:pid", nil)
		_, err := call(t, h, "big.pid", nil)
		st := wantCode(t, err, codes.ResourceExhausted, `result of tool "big.pid" is more than 262144 bytes, over the 262144-byte limit (maxResultBytes of server "big")`)
		if errreason.Of(st.Err()) != errreason.ToolResultTooLarge {
			t.Errorf("reason %q; want %s", errreason.Of(st.Err()), errreason.ToolResultTooLarge)
		}
	})
	t.Run("CallToolStream", func(t *testing.T) {
		p.set("tools/call:pid", streamedText(50<<20, false))
		defer p.set("tools/call:pid", nil)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		st, err := h.client.CallToolStream(ctx, &toolmeshv1.ExecutorServiceCallToolStreamRequest{Call: &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: "big.pid"}})
		if err != nil {
			t.Fatal(err)
		}
		var last *toolmeshv1.ExecutorServiceCallToolResponse
		for {
			m, err := st.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if r := m.GetResult(); r != nil {
				last = r
			}
		}
		blocks := last.GetContent()
		if len(blocks) != 2 || !strings.HasPrefix(blocks[1].GetText(), CutMarker) {
			t.Errorf("got %d blocks; want the cut text and the marker", len(blocks))
		}
		if got := st.Trailer().Get(CutTrailer); len(got) != 1 || got[0] != strconv.Itoa(serverLimit) {
			t.Errorf("trailer %s = %v; want [%d]", CutTrailer, got, serverLimit)
		}
	})
}

func TestCloseJSON(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"whole", `{"a":[1,"x"]}`, `{"a":[1,"x"]}`},
		{"in a string value", `{"result":{"content":[{"type":"text","text":"abcdef`, `{"result":{"content":[{"type":"text","text":"abcdef"}]}}`},
		{"right after a value's quote", `{"a":"`, `{"a":""}`},
		{"in a key", `{"a":1,"bc`, `{"a":1}`},
		{"after a colon", `{"a":1,"b":`, `{"a":1}`},
		{"after a comma", `[1,2,`, `[1,2]`},
		{"in a number", `{"a":12`, `{}`},
		{"a number ended by a comma", `{"a":12,`, `{"a":12}`},
		{"in a literal", `[true,fal`, `[true]`},
		{"in an escape", `["ab\u00`, `["ab"]`},
		{"after an escape", `["a\"b`, `["a\"b"]`},
		{"a backslash last", `["ab\`, `["ab"]`},
		{"in a character", "[\"a\xc3", `["a"]`},
		{"after a character", "[\"a\xc3\xa9", "[\"a\xc3\xa9\"]"},
		{"nested, a closed object before", `{"c":[{"t":"x"},{"t":"y`, `{"c":[{"t":"x"},{"t":"y"}]}`},
		{"an object begun", `{"c":[{"t":"x"},{`, `{"c":[{"t":"x"},{}]}`},
		{"a key of an object begun", `{"c":[{"t":"x"},{"ty`, `{"c":[{"t":"x"},{}]}`},
		{"SSE data is not JSON", `data: {"a":1}`, ""},
		{"nothing", ``, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := closeJSON([]byte(tt.in))
			if tt.want == "" {
				if ok {
					t.Errorf("closeJSON(%q) = %q; want none", tt.in, got)
				}
				return
			}
			if !ok || string(got) != tt.want {
				t.Errorf("closeJSON(%q) = %q, %v; want %q", tt.in, got, ok, tt.want)
			}
		})
	}
}

// TestCloseJSONEveryPrefix: every prefix of a result closes to valid JSON, and the longer
// the prefix the more of the text it keeps.
func TestCloseJSONEveryPrefix(t *testing.T) {
	doc := `{"jsonrpc":"2.0","id":"a\"1","result":{"content":[{"type":"text","text":"d\u00e9j\u00e0 vu, naïve\n"},` +
		`{"type":"image","data":"AAAA","mimeType":"image/png"}],"structuredContent":{"n":[1,-2.5e3,true,null]},"isError":false}}`
	for i := 1; i <= len(doc); i++ {
		got, ok := closeJSON([]byte(doc[:i]))
		if !ok {
			continue
		}
		var v any
		if err := json.Unmarshal(got, &v); err != nil {
			t.Fatalf("prefix %q closed to %q: %v", doc[:i], got, err)
		}
	}
}

func TestResultFromHead(t *testing.T) {
	tests := []struct {
		name  string
		head  string
		ok    bool
		texts []string
		left  []string
	}{
		{"text cut", `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hello wor`, true, []string{"hello wor"}, nil},
		{"an SSE event", "event: message\nid: 5\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"abc", true, []string{"abc"}, nil},
		{"a legacy SSE data line", `data: {"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"abc`, true, []string{"abc"}, nil},
		{"id last (TypeScript SDK)", `{"result":{"content":[{"type":"text","text":"a"},{"type":"text","text":"bc`, true, []string{"a", "bc"}, nil},
		{"an image cut", `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"a"},{"type":"image","mimeType":"image/png","data":"iVBO`, true, []string{"a"}, []string{"an image"}},
		{"structured content cut", `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"{}"}],"structuredContent":{"rows":[1,2`, true, []string{"{}"}, []string{"structured content"}},
		{"cut before the content", `{"jsonrpc":"2.0","id":1,"result":{"_meta":{"x":"yyy`, true, nil, nil},
		{"an error answer", `{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"xxx`, false, nil, nil},
		{"a notification", `{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"xxx`, false, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cut := &resultCut{}
			res, ok := resultFromHead([]byte(tt.head), cut)
			if ok != tt.ok {
				t.Fatalf("ok = %v; want %v", ok, tt.ok)
			}
			if !ok {
				return
			}
			var texts []string
			for _, c := range res.Content {
				texts = append(texts, c.(mcp.TextContent).Text)
			}
			if fmt.Sprint(texts) != fmt.Sprint(tt.texts) || fmt.Sprint(cut.left) != fmt.Sprint(tt.left) {
				t.Errorf("texts %q, left out %q; want %q, %q", texts, cut.left, tt.texts, tt.left)
			}
		})
	}
}

func TestCutResponse(t *testing.T) {
	text := func(s string) *toolmeshv1.Content { return &toolmeshv1.Content{Type: "text", Text: proto.String(s)} }
	image := &toolmeshv1.Content{Type: "image", MimeType: proto.String("image/png"), Data: make([]byte, 300)}
	sc, _ := structpb.NewStruct(map[string]any{"rows": strings.Repeat("r", 300)})
	tests := []struct {
		name  string
		in    []*toolmeshv1.Content
		sc    *structpb.Struct
		limit int
		cut   bool
		lens  []int // text lengths kept, the marker not counted
		left  string
	}{
		{"under the limit", []*toolmeshv1.Content{text("abc")}, sc, 1000, false, []int{3}, ""},
		{"one text cut", []*toolmeshv1.Content{text(strings.Repeat("a", 1000))}, nil, 500, true, []int{485}, ""},
		{"the blocks after it", []*toolmeshv1.Content{text("abc"), text(strings.Repeat("a", 1000)), text("z")}, nil, 500, true, []int{3, 468},
			"the content blocks after it"},
		{"an image that does not fit", []*toolmeshv1.Content{text(strings.Repeat("a", 200)), image}, nil, 400, true, []int{200}, "an image"},
		{"structured content that does not fit", []*toolmeshv1.Content{text(strings.Repeat("a", 200))}, sc, 400, true, []int{200}, "structured content"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := &toolmeshv1.ExecutorServiceCallToolResponse{Content: tt.in, StructuredContent: tt.sc}
			cut := cutResponse(out, tt.limit, "maxResultBytes of server \"s\"", nil)
			if (cut != nil) != tt.cut {
				t.Fatalf("cut = %v; want %v", cut, tt.cut)
			}
			blocks := out.GetContent()
			if cut != nil {
				marker := blocks[len(blocks)-1].GetText()
				if !strings.HasPrefix(marker, CutMarker) || !strings.Contains(marker, tt.left) {
					t.Errorf("marker %q; want one that leaves out %q", marker, tt.left)
				}
				blocks = blocks[:len(blocks)-1]
				if n := proto.Size(out); n > tt.limit+markerBytes {
					t.Errorf("%d bytes, over the limit and the marker", n)
				}
			}
			var lens []int
			for _, b := range blocks {
				lens = append(lens, len(b.GetText()))
			}
			if fmt.Sprint(lens) != fmt.Sprint(tt.lens) {
				t.Errorf("texts of %v bytes; want %v", lens, tt.lens)
			}
		})
	}
}

// TestDroppedHeadsBounded: heads no call takes (it ended before its answer came) are let go.
func TestDroppedHeadsBounded(t *testing.T) {
	var d droppedHeads
	for i := range 100 {
		d.Store(strconv.Itoa(i), make([]byte, 1<<10))
	}
	if len(d.heads) != maxDropped || len(d.order) != maxDropped {
		t.Fatalf("%d heads kept; want %d", len(d.heads), maxDropped)
	}
	if _, ok := d.LoadAndDelete("99"); !ok {
		t.Error("the newest head was let go")
	}
	if _, ok := d.Load("0"); ok {
		t.Error("the oldest head is still kept")
	}
}
