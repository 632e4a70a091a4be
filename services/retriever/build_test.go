package retriever

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"

	"github.com/toolmesh/toolmesh/internal/eventually"
)

// countingIndex counts the tools written through it, to see what a restart re-indexes.
type countingIndex struct {
	toolIndex
	upserted atomic.Int64
}

func (c *countingIndex) Upsert(ctx context.Context, tools []*toolmeshv1.Tool) error {
	c.upserted.Add(int64(len(tools)))
	return c.toolIndex.Upsert(ctx, tools)
}

func demoTools(t *testing.T) []*toolmeshv1.Tool {
	t.Helper()
	schema := func(props map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(map[string]any{"type": "object", "properties": props})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	num := func(desc string) map[string]any { return map[string]any{"type": "number", "description": desc} }
	return []*toolmeshv1.Tool{
		{Id: "calculator.add", Server: "calculator", Name: "add", Hash: "1", Description: "Add two numbers: returns a + b.",
			InputSchema: schema(map[string]any{"a": num("first addend"), "b": num("second addend")})},
		{Id: "converter.celsius_to_fahrenheit", Server: "converter", Name: "celsius_to_fahrenheit", Hash: "1",
			Description: "Convert a temperature from degrees Celsius to degrees Fahrenheit.", InputSchema: schema(map[string]any{"celsius": num("degrees Celsius")})},
		{Id: "converter.fahrenheit_to_celsius", Server: "converter", Name: "fahrenheit_to_celsius", Hash: "1",
			Description: "Convert a temperature from degrees Fahrenheit to degrees Celsius.", InputSchema: schema(map[string]any{"fahrenheit": num("degrees Fahrenheit")})},
	}
}

// TestPersistedIndexSurvivesRestart runs the real index on the memory store with a data
// dir: after a restart against the same tool set nothing is indexed again.
func TestPersistedIndexSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	fake := &fakeExecutor{snapshot: demoTools(t), events: make(chan *toolmeshv1.WatchToolsResponse)}
	addr, stop := serveExecutor(t, "127.0.0.1:0", fake)
	defer stop()
	cfg := Config{ExecutorAddr: addr, Store: "memory", Embedder: "lexical", DataDir: dir,
		GRPCAddr: "127.0.0.1:0", ResyncBackoffMax: 100 * time.Millisecond}

	run := func() (*Service, *countingIndex, func()) {
		s, err := New(context.Background(), cfg, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		counting := &countingIndex{toolIndex: s.idx}
		s.idx = counting
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = s.Run(ctx) }()
		eventually.True(t, 5*time.Second, "synced", func() bool { ok, _ := s.Ready(context.Background()); return ok })
		return s, counting, func() { cancel(); <-done }
	}

	s, first, stopFirst := run()
	if got := first.upserted.Load(); got != 3 {
		t.Errorf("first start indexed %d tools, want 3", got)
	}
	resp, err := s.SearchTools(context.Background(), &toolmeshv1.RetrieverServiceSearchToolsRequest{Query: "convert 30 degrees celsius to fahrenheit", K: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetResults(); len(got) != 1 || got[0].GetTool().GetId() != "converter.celsius_to_fahrenheit" {
		t.Errorf("search results = %v, want converter.celsius_to_fahrenheit", got)
	}
	_, err = s.SearchTools(context.Background(), &toolmeshv1.RetrieverServiceSearchToolsRequest{Query: "the of and 42"})
	if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "query:") {
		t.Errorf("search with only stop words: %v, want INVALID_ARGUMENT naming query", err)
	}
	stopFirst()

	_, second, stopSecond := run()
	defer stopSecond()
	if got := second.upserted.Load(); got != 0 {
		t.Errorf("restart re-indexed %d tools, want 0 (the index was persisted)", got)
	}
}
