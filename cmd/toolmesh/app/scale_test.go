package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/server"
)

// manyTools is how many tools the big server offers: enough that the executor's catalog, in
// one WatchTools snapshot or one ListTools answer, is over grpc-go's default 4 MiB receive
// limit (4.85 MB at ~970 bytes a tool; the test checks it stays over), and few enough to run
// in about 12 s under -race on two cores, most of it the mesh indexing and listing them.
const manyTools = 5000

// needle is the one tool the search must find among the others.
const needle = 4321

// words make the tools' descriptions read like real ones (BFCL's are ~700 bytes a tool with
// their parameters), without two tools sharing the needle's phrase.
var words = strings.Fields(`account address amount archive balance booking calendar city
	commit contact currency customer date device document email event file flight forecast
	hotel image invoice issue language location message meeting order payment playlist price
	product project recipe record report reservation route schedule shipment song stock ticket
	timezone track transaction user vehicle weather`)

// bigTool is tool i of the big server: a description of a few sentences and four parameters.
func bigTool(i int) mcp.Tool {
	w := func(k int) string { return words[(i*7+k*13)%len(words)] }
	desc := fmt.Sprintf("Retrieve the %s of a %s for the given %s. Returns the %s together with its %s "+
		"and %s, sorted by %s. Use it when the user asks about a %s or wants to compare %s across %s; "+
		"results are paginated and limited to the requested page size. Fails when the %s does not exist.",
		w(1), w(2), w(3), w(1), w(4), w(5), w(6), w(2), w(7), w(8), w(3))
	if i == needle {
		desc = "Report the tidal narwhal migration census for a fjord. " + desc
	}
	return mcp.NewTool(fmt.Sprintf("get_%s_%s_%05d", w(1), w(2), i), mcp.WithDescription(desc),
		mcp.WithString(w(3)+"_id", mcp.Required(), mcp.Description(fmt.Sprintf("Identifier of the %s, as returned by the list call.", w(3)))),
		mcp.WithString("sort_by", mcp.Enum("date", "name", "relevance"), mcp.Description("Field to sort the results by.")),
		mcp.WithNumber("page_size", mcp.Min(1), mcp.Max(100), mcp.Description("How many results one page holds, 1 to 100.")),
		mcp.WithBoolean("include_archived", mcp.Description(fmt.Sprintf("Also return archived %s entries.", w(2)))),
	)
}

// serveBigTools serves the big server's tools over streamable HTTP until the test ends.
func serveBigTools(t *testing.T) string {
	t.Helper()
	echo := func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText(r.Params.Name), nil
	}
	tools := make([]mcpserver.ServerTool, manyTools)
	for i := range tools {
		tools[i] = mcpserver.ServerTool{Tool: bigTool(i), Handler: echo}
	}
	return serveTools(t, "big", tools)
}

// get fetches url and returns the status and body.
func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// retrieverError is the last error of the retriever's index, for a failure message.
func retrieverError(t *testing.T, addr string) string {
	t.Helper()
	conn, err := grpc.NewClient(addr, server.DialOptions()...)
	if err != nil {
		return err.Error()
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := toolmeshv1.NewRetrieverServiceClient(conn).GetIndexStatus(ctx, &toolmeshv1.GetIndexStatusRequest{})
	if err != nil {
		return err.Error()
	}
	return st.GetLastError()
}

// catalogSize is the size of the executor's ListTools answer, the catalog in one message.
func catalogSize(t *testing.T, addr string) int {
	t.Helper()
	conn, err := grpc.NewClient(addr, server.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := toolmeshv1.NewExecutorServiceClient(conn).ListTools(ctx, &toolmeshv1.ExecutorServiceListToolsRequest{})
	if err != nil {
		t.Fatalf("executor ListTools: %v", err)
	}
	return proto.Size(resp)
}

// TestManyTools runs a mesh whose one MCP server has thousands of tools, so the catalog the
// executor sends in one gRPC message is over grpc-go's default 4 MiB: /readyz still becomes
// ready with every tool indexed, GET /v1/tools lists them all and search finds one of them.
func TestManyTools(t *testing.T) {
	checkFDs(t)
	url := serveBigTools(t)
	cfg := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `{"mcpServers": {"big": {"url": %q}}}`, url), 0o600); err != nil {
		t.Fatal(err)
	}
	a, _ := runApp(t, []string{
		"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--executor.grpc-addr=127.0.0.1:0",
		"--retriever.grpc-addr=127.0.0.1:0", "--api.inference-addr=", "--drain-timeout=2s", "--mcp-config=" + cfg,
		// What is checked here is size, not speed: under the race detector on a busy 2-core
		// machine, listing and checking 5,000 tools took longer than the 10 s default.
		"--executor.connect-timeout=60s",
	}, "executor", "retriever", "api")
	addrs := map[string]string{}
	for _, e := range a.Endpoints {
		addrs[e.Name] = e.Addr
	}
	base := addrs["REST"]

	// Ready means the retriever followed the executor's snapshot of every tool. With
	// grpc-go's default 4 MiB receive limit it never could: each subscription failed with
	// "grpc: received message larger than max (4849459 vs. 4194304)" and /readyz stayed 503
	// with "index catching up: 0 of 5000 tools indexed" (then without the cause; /readyz now
	// adds the retriever's last sync error).
	start := time.Now()
	var code int
	var body []byte
	deadline := time.Now().Add(90 * time.Second)
	for {
		code, body = get(t, base+"/readyz")
		if code == http.StatusOK || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var ready struct {
		Status       string `json:"status"`
		IndexedTools int    `json:"indexed_tools"`
	}
	if err := json.Unmarshal(body, &ready); err != nil || code != http.StatusOK || ready.IndexedTools != manyTools {
		t.Errorf("/readyz with %d tools: %d %s; want 200 with indexed_tools %d (the retriever's last error: %s)",
			manyTools, code, body, manyTools, retrieverError(t, addrs["retriever gRPC"]))
	} else {
		t.Logf("ready with %d tools indexed in %s", manyTools, time.Since(start))
	}

	// With the default limit the api's call to the executor failed and REST answered 429
	// (RESOURCE_EXHAUSTED) "grpc: received message larger than max".
	code, body = get(t, base+"/v1/tools?server=big")
	var list struct {
		Tools []struct{ ID string } `json:"tools"`
	}
	want := "big." + bigTool(needle).Name
	if err := json.Unmarshal(body, &list); err != nil || code != http.StatusOK || len(list.Tools) != manyTools ||
		!slices.ContainsFunc(list.Tools, func(tl struct{ ID string }) bool { return tl.ID == want }) {
		if len(body) > 500 {
			body = body[:500]
		}
		t.Fatalf("GET /v1/tools?server=big: %d, %d tools (%v) %s; want 200 and %d tools, %s among them",
			code, len(list.Tools), err, body, manyTools, want)
	}
	// The test is only worth its time while the catalog is over the limit it guards against.
	if size := catalogSize(t, addrs["executor gRPC"]); size <= 4<<20 {
		t.Errorf("the catalog is %d bytes in protobuf, not over grpc-go's default 4 MiB: raise manyTools", size)
	} else {
		t.Logf("%d tools, %d bytes in one ListTools answer (%d a tool)", manyTools, size, size/manyTools)
	}

	code, body = get(t, base+"/v1/tools:search?q=narwhal+migration+census&k=3")
	var found struct {
		Results []struct {
			Tool struct {
				ID string `json:"id"`
			} `json:"tool"`
		} `json:"results"`
	}
	if err := json.Unmarshal(body, &found); err != nil || code != http.StatusOK || len(found.Results) == 0 || found.Results[0].Tool.ID != want {
		t.Errorf("search for the narwhal census: %d %s; want %s first", code, body, want)
	}
}
