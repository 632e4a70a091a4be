package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/audit"
	"github.com/toolmesh/toolmesh/internal/eventually"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/internal/policy"
	"github.com/toolmesh/toolmesh/internal/server"
)

// auditedAPI is the api against test doubles with its audit trail on: its gRPC client
// connection, its REST server and the trail's file.
type auditedAPI struct {
	conn *grpc.ClientConn
	rest *httptest.Server
	file string
	svc  *Service
}

func startAudited(t *testing.T, cfg Config, exec *recordingExecutor, retr *searchingRetriever, model *steeredModel) *auditedAPI {
	t.Helper()
	cfg.ExecutorAddr = startGRPC(t, func(g *grpc.Server) { toolmeshv1.RegisterExecutorServiceServer(g, exec) })
	cfg.RetrieverAddr = startGRPC(t, func(g *grpc.Server) { toolmeshv1.RegisterRetrieverServiceServer(g, retr) })
	cfg.InferenceAddr = startGRPC(t, func(g *grpc.Server) { toolmeshv1.RegisterInferenceServiceServer(g, model) })
	cfg.MaxParallelCalls, cfg.MaxOutputBytes, cfg.QueryTimeout = 2, 4096, 10*time.Second
	if cfg.Audit.File == "" {
		cfg.Audit.File = filepath.Join(t.TempDir(), "audit.jsonl")
	}
	svc, err := New(cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(svc.ServerOptions()...)
	svc.Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), server.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	h, closeGW, err := svc.Gateway(context.Background(), lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeGW)
	rest := httptest.NewServer(h)
	t.Cleanup(rest.Close)
	return &auditedAPI{conn: conn, rest: rest, file: cfg.Audit.File, svc: svc}
}

// records waits for n call records in the trail and returns them.
func (a *auditedAPI) records(t *testing.T, n int) []map[string]any {
	t.Helper()
	var out []map[string]any
	eventually.Check(t, 5*time.Second, "the audit records", func() string {
		data, _ := os.ReadFile(a.file)
		out = out[:0]
		for l := range bytes.Lines(data) {
			var m map[string]any
			if err := json.Unmarshal(l, &m); err != nil {
				return err.Error()
			}
			if m["type"] == "call" {
				out = append(out, m)
			}
		}
		if len(out) < n {
			return fmt.Sprintf("%d call records:\n%s", len(out), data)
		}
		return ""
	})
	return out
}

// TestAuditEveryFront: a call over gRPC, over REST, a direct query's and the model's calls,
// and the refused ones, each write one record saying who (the token), from where (the address
// the api saw; X-Forwarded-For and the gateway's own metadata only as what the client
// claimed), through which front, and what the policy decided; the trail verifies.
func TestAuditEveryFront(t *testing.T) {
	const tokenCI, tokenNarrow = "ci-token-0123456789abcdef", "narrow-token-0123456789abcdef"
	cfg := testConfig("", "")
	cfg.Tokens = "ci:" + tokenCI + ",narrow:" + tokenNarrow
	cfg.Policy = policy.Config{Tokens: map[string]policy.Scope{
		"ci":     {Call: []string{"*"}, List: []string{"*"}, Search: []string{"*"}, Query: true},
		"narrow": {Call: []string{"conv"}},
	}}
	exec := &recordingExecutor{text: "5"}
	a := startAudited(t, cfg, exec, &searchingRetriever{tools: []*toolmeshv1.Tool{readOnlyTool("calc.add")}}, &steeredModel{steer: "db.drop"})
	as := func(token string, kv ...string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), append([]string{"authorization", "Bearer " + token}, kv...)...)
	}
	tools, agent := toolmeshv1.NewToolServiceClient(a.conn), toolmeshv1.NewAgentServiceClient(a.conn)
	args, _ := structpb.NewStruct(map[string]any{"a": 2, "b": 3})

	// 1: gRPC, a client that claims to be another address, in both ways it could.
	if _, err := tools.CallTool(as(tokenCI, "x-forwarded-for", "198.51.100.9", "x-toolmesh-edge", "guess", "x-toolmesh-edge-client", "192.0.2.66:1"),
		&toolmeshv1.CallToolRequest{Server: "calc", Name: "add", Arguments: args}); err != nil {
		t.Fatal(err)
	}
	// 2: REST, through the gateway, with an X-Forwarded-For of its own, and the metadata the
	// gateway sends the gRPC server as headers of its own (the gateway must not pass them on).
	req, _ := http.NewRequest(http.MethodPost, a.rest.URL+"/v1/tools/calc/add:call", strings.NewReader(`{"arguments":{"a":2,"b":3}}`))
	req.Header.Set("Authorization", "Bearer "+tokenCI)
	req.Header.Set("X-Forwarded-For", "203.0.113.5")
	req.Header.Set("Grpc-Metadata-X-Toolmesh-Edge", "guess")
	req.Header.Set("Grpc-Metadata-X-Toolmesh-Edge-Client", "192.0.2.66:1")
	req.Header.Set("Grpc-Metadata-X-Toolmesh-Edge-Via", "grpc")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("REST call: %d", resp.StatusCode)
	}
	// 3: refused by the token's scope.
	if _, err := tools.CallTool(as(tokenNarrow), &toolmeshv1.CallToolRequest{Server: "calc", Name: "add"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("narrow token's call: %v", err)
	}
	// 4: a direct query's call.
	if _, err := agent.Query(as(tokenCI), &toolmeshv1.QueryRequest{Query: `@calc.add({"a":1})`}); err != nil {
		t.Fatal(err)
	}
	// 5, 6: the model's call, then one it was steered to and not offered (refused).
	if _, err := agent.Query(as(tokenCI), &toolmeshv1.QueryRequest{Query: "Add one to the total."}); err != nil {
		t.Fatal(err)
	}

	recs := a.records(t, 6)
	type want struct{ via, origin, token, tool, decision, rule, forwarded string }
	wants := []want{
		{"grpc", "call", "ci", "calc.add", "allowed", "", "198.51.100.9"},
		{"rest", "call", "ci", "calc.add", "allowed", "", "203.0.113.5"},
		{"grpc", "call", "narrow", "calc.add", "denied", "scope", ""},
		{"grpc", "query", "ci", "calc.add", "allowed", "", ""},
		{"grpc", "model", "ci", "calc.add", "allowed", "", ""},
		{"grpc", "model", "ci", "db.drop", "denied", "offered", ""},
	}
	if len(recs) != len(wants) {
		t.Fatalf("%d call records, want %d: %v", len(recs), len(wants), recs)
	}
	str := func(m map[string]any, k string) string { s, _ := m[k].(string); return s }
	for i, w := range wants {
		r := recs[i]
		got := want{str(r, "via"), str(r, "origin"), str(r, "token"), str(r, "tool"), str(r, "decision"), str(r, "rule"), str(r, "forwarded_for")}
		if got != w {
			t.Errorf("record %d: %+v, want %+v", i+1, got, w)
		}
		host, _, err := net.SplitHostPort(str(r, "client"))
		if err != nil || host != "127.0.0.1" {
			t.Errorf("record %d: client %q, want the loopback address the api saw", i+1, str(r, "client"))
		}
		if !strings.HasPrefix(str(r, "args_digest"), "sha256:") {
			t.Errorf("record %d: args_digest %v", i+1, r["args_digest"])
		}
	}
	if recs[0]["result_bytes"].(float64) == 0 || recs[2]["result_bytes"].(float64) != 0 {
		t.Errorf("result_bytes %v (a call) and %v (a refusal)", recs[0]["result_bytes"], recs[2]["result_bytes"])
	}
	if recs[0]["args_digest"] != recs[1]["args_digest"] {
		t.Errorf("the same arguments over gRPC and REST, digests %v and %v", recs[0]["args_digest"], recs[1]["args_digest"])
	}
	a.svc.Close()
	if _, err := audit.Verify([]string{a.file}, nil); err != nil {
		t.Errorf("Verify: %v", err)
	}
}

// TestAuditFailClosed: with --audit.on-failure=closed, once the trail cannot be written (a full
// disk: /dev/full) tool calls are refused with 503 rather than made unrecorded; fail-open (the
// default) goes on calling.
func TestAuditFailClosed(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full here")
	}
	for _, mode := range []string{audit.FailOpen, audit.FailClosed} {
		t.Run(mode, func(t *testing.T) {
			cfg := testConfig("", "")
			cfg.Audit = audit.Config{File: "/dev/full", OnFailure: mode}
			exec := &recordingExecutor{text: "5"}
			a := startAudited(t, cfg, exec, &searchingRetriever{}, &steeredModel{})
			tools, agent := toolmeshv1.NewToolServiceClient(a.conn), toolmeshv1.NewAgentServiceClient(a.conn)
			ctx := context.Background()
			if _, err := tools.CallTool(ctx, &toolmeshv1.CallToolRequest{Server: "calc", Name: "add"}); err != nil {
				t.Fatalf("first call: %v", err)
			}
			if mode == audit.FailOpen {
				time.Sleep(100 * time.Millisecond)
				if _, err := tools.CallTool(ctx, &toolmeshv1.CallToolRequest{Server: "calc", Name: "add"}); err != nil {
					t.Errorf("fail-open, trail failing: %v", err)
				}
				return
			}
			eventually.True(t, 5*time.Second, "calls refused", func() bool {
				_, err := tools.CallTool(ctx, &toolmeshv1.CallToolRequest{Server: "calc", Name: "add"})
				return status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), "audit trail")
			})
			before := len(exec.called())
			resp, err := agent.Query(ctx, &toolmeshv1.QueryRequest{Query: `@calc.add({"a":1})`})
			if status.Code(err) != codes.Unavailable || len(exec.called()) != before {
				t.Errorf("direct query, trail failing closed: %v %v, executor called %v", resp, err, exec.called())
			}
		})
	}
}

// pinEventsExecutor is an executor double that sends pin events to whoever watches them: the first
// connection gets two, then fails (an executor restarting); the next gets all three again, the
// third new. Its calls are recordingExecutor's.
type pinEventsExecutor struct {
	recordingExecutor
	mu     sync.Mutex
	conns  int
	events []*toolmeshv1.PinEvent
}

func (e *pinEventsExecutor) WatchPinEvents(_ *toolmeshv1.WatchPinEventsRequest, st grpc.ServerStreamingServer[toolmeshv1.WatchPinEventsResponse]) error {
	e.mu.Lock()
	e.conns++
	n := e.conns
	e.mu.Unlock()
	events := e.events[:2]
	if n > 1 {
		events = e.events
	}
	for _, ev := range events {
		if err := st.Send(&toolmeshv1.WatchPinEventsResponse{Event: ev}); err != nil {
			return err
		}
	}
	if n == 1 {
		return status.Error(codes.Unavailable, "executor stopping")
	}
	<-st.Context().Done()
	return nil
}

// TestAuditPinEvents: the executor's pin events (a tool quarantined, one approved) reach the
// api's audit trail as event records, once each across the executor's reconnection.
func TestAuditPinEvents(t *testing.T) {
	at := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	exec := &pinEventsExecutor{events: []*toolmeshv1.PinEvent{
		{Sequence: 1, Time: timestamppb.New(at), Type: toolmeshv1.PinEventType_PIN_EVENT_TYPE_CHANGED, ToolId: "notes.fetch", Pinning: "enforce",
			Quarantined: true, PinnedHash: "aaa", Hash: "bbb", Findings: []*toolmeshv1.ToolFinding{{Kind: toolmeshv1.FindingKind_FINDING_KIND_MODEL_INSTRUCTION, Field: "description", Rule: "ignore_instructions"}}},
		{Sequence: 2, Time: timestamppb.New(at.Add(time.Minute)), Type: toolmeshv1.PinEventType_PIN_EVENT_TYPE_APPROVED, ToolId: "notes.fetch", Pinning: "enforce",
			PinnedHash: "aaa", Hash: "bbb", ApprovedBy: "ops"},
		{Sequence: 3, Time: timestamppb.New(at.Add(2 * time.Minute)), Type: toolmeshv1.PinEventType_PIN_EVENT_TYPE_FIRST_SEEN, ToolId: "notes.save", Pinning: "warn", Hash: "ccc"},
	}}
	cfg := testConfig("", "")
	cfg.ExecutorAddr = startGRPC(t, func(g *grpc.Server) { toolmeshv1.RegisterExecutorServiceServer(g, exec) })
	cfg.RetrieverAddr, cfg.InferenceAddr = "", ""
	cfg.Audit.File = filepath.Join(t.TempDir(), "audit.jsonl")
	svc, err := New(cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	var events []map[string]any
	eventually.Check(t, 10*time.Second, "three pin events in the trail", func() string {
		events = events[:0]
		data, _ := os.ReadFile(cfg.Audit.File)
		for l := range bytes.Lines(data) {
			var m map[string]any
			if json.Unmarshal(l, &m) == nil && strings.HasPrefix(fmt.Sprint(m["type"]), "pin.") {
				events = append(events, m)
			}
		}
		if len(events) < 3 {
			return fmt.Sprintf("%d events:\n%s", len(events), data)
		}
		return ""
	})
	cancel()
	<-done
	var got []string
	for _, e := range events {
		got = append(got, fmt.Sprintf("%v %v | %v", e["type"], e["tool"], e["detail"]))
	}
	want := []string{
		"pin.changed notes.fetch | hash bbb; pinned aaa; pinning enforce; quarantined; findings description:ignore_instructions",
		"pin.approved notes.fetch | hash bbb; pinned aaa; pinning enforce; approved by ops",
		"pin.first_seen notes.save | hash ccc; pinning warn",
	}
	if !slices.Equal(got, want) {
		t.Errorf("pin events in the trail:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := audit.Verify([]string{cfg.Audit.File}, nil); err != nil {
		t.Error(err)
	}
}

// TestAuditRateLimited: a call refused by a tool's rateLimit is recorded as denied, rule
// rateLimit, whether it came as a tool call or in a direct query.
func TestAuditRateLimited(t *testing.T) {
	cfg := testConfig("", "")
	exec := &recordingExecutor{text: "5", rules: map[string]policy.ServerRules{
		"calc": {ToolRateLimits: map[string]*mcpconfig.RateLimit{"add": {Calls: 1, Per: time.Minute}}},
	}}
	a := startAudited(t, cfg, exec, &searchingRetriever{}, &steeredModel{})
	tools, agent := toolmeshv1.NewToolServiceClient(a.conn), toolmeshv1.NewAgentServiceClient(a.conn)
	ctx := context.Background()
	if _, err := tools.CallTool(ctx, &toolmeshv1.CallToolRequest{Server: "calc", Name: "add"}); err != nil {
		t.Fatal(err)
	}
	if _, err := tools.CallTool(ctx, &toolmeshv1.CallToolRequest{Server: "calc", Name: "add"}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second call: %v", err)
	}
	if _, err := agent.Query(ctx, &toolmeshv1.QueryRequest{Query: `@calc.add({"a":1})`}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("direct query: %v", err)
	}
	var got []string
	for _, r := range a.records(t, 3) {
		got = append(got, fmt.Sprintf("%v %v %v", r["origin"], r["decision"], r["rule"]))
	}
	if want := []string{"call allowed <nil>", "call denied rateLimit", "query denied rateLimit"}; !slices.Equal(got, want) {
		t.Errorf("records %v, want %v", got, want)
	}
}
