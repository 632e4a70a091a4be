// Command mcpface measures the api's MCP face (issue 19), side by side in one run:
//
//   - a tool call through toolmesh's /mcp (mcp-go client → api → executor → the MCP server)
//     against the same call made directly on the MCP server with a held mcp-go session, at 1
//     and at -callers concurrent callers sharing one session: p50, p99, calls/s and the CPU
//     time this process spends per call (client, mesh and servers). /mcp is measured on two
//     meshes: one as `toolmesh up` runs by default (the api calls the executor in the process)
//     and one whose services call each other over gRPC on loopback (the internal addresses
//     given, as `serve` runs them apart). The three are measured in alternating rounds so that
//     a busy machine weighs on all alike;
//   - tools/list of a -tools catalog through /mcp, every page (the face's page size), against
//     one tools/list of the same tools on the server directly.
//
// Everything runs on loopback in this process: the MCP servers (mcp-go, streamable HTTP) and
// the two meshes' executor, retriever and api targets. Every client speaks the same protocol
// version (-protocol).
//
//	go run ./bench/mcpface [-callers 64] [-duration 5s] [-rounds 3] [-tools 10000] [-json FILE] [-only calls|list] [-cpuprofile F]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/toolmesh/toolmesh/bench/internal/callstats"
	"github.com/toolmesh/toolmesh/bench/internal/figures"
	"github.com/toolmesh/toolmesh/bench/internal/inproc"
	"github.com/toolmesh/toolmesh/bench/internal/loadavg"
)

func main() {
	callers := flag.Int("callers", 64, "concurrent callers sharing one session")
	duration := flag.Duration("duration", 5*time.Second, "length of one measured round")
	rounds := flag.Int("rounds", 3, "rounds of each path, alternating")
	tools := flag.Int("tools", 10000, "tools in the catalog listed through /mcp")
	listRuns := flag.Int("list-runs", 20, "full tools/list runs of each path")
	protocol := flag.String("protocol", mcp.LATEST_PROTOCOL_VERSION, "MCP protocol version both clients speak")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	jsonPath := flag.String("json", "", "also write the figures as JSON to this file, for bench/report")
	only := flag.String("only", "", `measure only "calls" or only "list" (for a profile of one path); both when empty`)
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "mcpface: -cpuprofile:", err)
			os.Exit(1)
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	if *only != "" && *only != "calls" && *only != "list" {
		fmt.Fprintln(os.Stderr, `mcpface: -only: want "calls" or "list"`)
		os.Exit(2)
	}
	figs := &figures.MCPFace{Protocol: *protocol, Callers: *callers}
	if err := run(figs, *callers, *duration, *rounds, *tools, *listRuns, *protocol, *only); err != nil {
		fmt.Fprintln(os.Stderr, "mcpface:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
	if *jsonPath != "" {
		if err := figures.Write(*jsonPath, figs); err != nil {
			fmt.Fprintln(os.Stderr, "mcpface:", err)
			os.Exit(1)
		}
	}
}

func run(figs *figures.MCPFace, callers int, duration time.Duration, rounds, nTools, listRuns int, protocol, only string) error {
	if callers < 1 || rounds < 1 || nTools < 1 || listRuns < 1 || duration <= 0 {
		return errors.New("-callers, -rounds, -tools, -list-runs and -duration must be positive")
	}
	echoURL, stopEcho, err := serve("echo", []mcpserver.ServerTool{{Tool: mcp.NewTool("echo",
		mcp.WithDescription("Echo the message back."), mcp.WithString("message", mcp.Required())),
		Handler: func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(r.GetString("message", "")), nil
		}}})
	if err != nil {
		return err
	}
	defer stopEcho()
	big := make([]mcpserver.ServerTool, nTools)
	for i := range big {
		big[i] = mcpserver.ServerTool{Tool: mcp.NewTool(fmt.Sprintf("tool_%05d", i),
			mcp.WithDescription(fmt.Sprintf("Tool number %d of the big catalog: it looks up record %d and returns it.", i, i)),
			mcp.WithString("id", mcp.Required(), mcp.Description("The record's id.")),
			mcp.WithNumber("limit", mcp.Min(1), mcp.Max(100))),
			Handler: func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return mcp.NewToolResultText("ok"), nil
			}}
	}
	bigURL, stopBig, err := serve("big", big)
	if err != nil {
		return err
	}
	defer stopBig()

	dir, err := os.MkdirTemp("", "mcpface-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "mcp.json")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `{"mcpServers": {"echo": {"url": %q}, "big": {"url": %q}}}`, echoURL, bigURL), 0o600); err != nil {
		return err
	}
	restUp, stopUp, err := startMesh(cfg, false)
	if err != nil {
		return err
	}
	defer stopUp()
	restGRPC, stopGRPC, err := startMesh(cfg, true)
	if err != nil {
		return err
	}
	defer stopGRPC()

	load0 := loadavg.Now()
	start := time.Now()
	ctx := context.Background()
	direct, err := connect(ctx, echoURL, protocol)
	if err != nil {
		return fmt.Errorf("direct session: %w", err)
	}
	defer direct.Close()
	face, err := connect(ctx, restUp+"/mcp", protocol)
	if err != nil {
		return fmt.Errorf("session on /mcp: %w", err)
	}
	defer face.Close()
	faceGRPC, err := connect(ctx, restGRPC+"/mcp", protocol)
	if err != nil {
		return fmt.Errorf("session on /mcp of the mesh over gRPC: %w", err)
	}
	defer faceGRPC.Close()
	for _, c := range []*session{face, faceGRPC} {
		if err := waitCatalog(ctx, c.Client, nTools+1); err != nil {
			return err
		}
	}

	if only != "list" {
		paths := []callPath{
			{"direct", "direct (held mcp-go session)", direct.Client, "echo"},
			{"face", "through toolmesh /mcp, up (services in the process)", face.Client, "echo__echo"},
			{"face-grpc", "through toolmesh /mcp, services over gRPC", faceGRPC.Client, "echo__echo"},
		}
		if err := compareCalls(ctx, figs, paths, callers, duration, rounds, protocol); err != nil {
			return err
		}
	}
	if only != "calls" {
		if err := compareLists(ctx, figs, bigURL, face.Client, nTools, listRuns, protocol); err != nil {
			return err
		}
	}
	load1 := loadavg.Now()
	fmt.Printf("\ntook %s; load average %s → %s: %s\n", time.Since(start).Round(time.Second), load0, load1, loadavg.Verdict(load0, load1, runtime.NumCPU()))
	return nil
}

// callPath is one way to call the echo tool: the first of compareCalls' paths is the baseline.
type callPath struct {
	name, title string
	client      *client.Client
	tool        string
}

// compareCalls measures calls of the echo tool on each path, at 1 and at callers callers, in
// alternating rounds, against the first path (direct).
func compareCalls(ctx context.Context, figs *figures.MCPFace, paths []callPath, callers int, duration time.Duration, rounds int, protocol string) error {
	fmt.Printf("MCP face vs direct held session, %s, GOMAXPROCS %d, protocol %s, %d rounds of %s each, alternating\n\n",
		runtime.Version(), runtime.GOMAXPROCS(0), protocol, rounds, duration)
	fmt.Println("| path | callers | calls | calls/s | p50 | p90 | p99 | CPU/call |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|")
	var summary []string
	for _, n := range []int{1, callers} {
		stats := make([]callstats.Stats, len(paths))
		for range rounds {
			for i, p := range paths {
				if err := stats[i].Round(n, duration, callOf(ctx, p.client, p.tool)); err != nil {
					return fmt.Errorf("%s: %w", p.title, err)
				}
			}
		}
		d := &stats[0]
		for i, p := range paths {
			fmt.Println(stats[i].Row(p.title, n))
			figs.Calls = append(figs.Calls, callFigures(&stats[i], p.name, n))
			if i > 0 {
				f := &stats[i]
				// The CPU a call costs the whole process (client, mesh and servers alike)
				// depends far less on what else runs on the machine than calls/s does; on a
				// machine the callers keep busy, calls/s follows it: direct's CPU per call over
				// the path's.
				summary = append(summary, fmt.Sprintf("at %d callers, %s: adds %+.0f µs to p50; calls/s %.2f× direct (CPU per call says %.2f×)",
					n, p.title, callstats.Micro(f.P(50)-d.P(50)), f.Rate()/d.Rate(), d.CPUPerCall().Seconds()/f.CPUPerCall().Seconds()))
			}
		}
	}
	fmt.Println()
	for _, line := range summary {
		fmt.Println(line)
	}
	fmt.Printf("targets at %d callers: p50 ≤ +150 µs, calls/s ≥ 0.7× direct, CPU per call ≤ 1.5× direct\n\n", callers)
	return nil
}

// compareLists lists every tool of the big server through /mcp, page by page, and in one
// tools/list on the server directly.
func compareLists(ctx context.Context, figs *figures.MCPFace, bigURL string, face *client.Client, nTools, listRuns int, protocol string) error {
	bigDirect, err := connect(ctx, bigURL, protocol)
	if err != nil {
		return fmt.Errorf("direct session on the big server: %w", err)
	}
	defer bigDirect.Close()
	fmt.Printf("tools/list of %d tools, %d runs each\n\n", nTools, listRuns)
	fmt.Println("| path | tools | pages | p50 | max |")
	fmt.Println("|---|---:|---:|---:|---:|")
	figs.List = &figures.MCPFaceList{Tools: nTools}
	for i, c := range []struct {
		name   string
		client *client.Client
		want   int
	}{{"direct, one tools/list (the server does not paginate)", bigDirect.Client, nTools}, {"through toolmesh /mcp, every page", face, nTools + 1}} {
		var times []time.Duration
		var pages int
		for range listRuns {
			t0 := time.Now()
			n, p, err := listAll(ctx, c.client)
			if err != nil {
				return err
			}
			times = append(times, time.Since(t0))
			if n != c.want {
				return fmt.Errorf("%s listed %d tools, want %d", c.name, n, c.want)
			}
			pages = p
		}
		slices.Sort(times)
		fmt.Printf("| %s | %d | %d | %s | %s |\n", c.name, c.want, pages, ms(times[len(times)/2]), ms(times[len(times)-1]))
		p50 := float64(times[len(times)/2]) / float64(time.Millisecond)
		if i == 0 {
			figs.List.DirectP50Ms = p50
		} else {
			figs.List.FaceP50Ms, figs.List.Pages = p50, pages
		}
	}
	return nil
}

// callOf calls tool on c with a message, an error result counting as an error.
func callOf(ctx context.Context, c *client.Client, tool string) func() error {
	return func() error {
		req := mcp.CallToolRequest{}
		req.Params.Name = tool
		req.Params.Arguments = map[string]any{"message": "hello"}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		res, err := c.CallTool(cctx, req)
		if err == nil && res.IsError {
			err = fmt.Errorf("%s returned an error result: %v", tool, res.Content)
		}
		return err
	}
}

func callFigures(s *callstats.Stats, path string, n int) figures.MCPFaceCalls {
	return figures.MCPFaceCalls{Path: path, Callers: n, Calls: s.Calls(), CallsPerSec: s.Rate(),
		P50: callstats.Micro(s.P(50)), P99: callstats.Micro(s.P(99)), CPUPerCall: callstats.Micro(s.CPUPerCall())}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// serve runs an MCP server with tools over streamable HTTP on loopback.
func serve(name string, tools []mcpserver.ServerTool) (string, func(), error) {
	m := mcpserver.NewMCPServer(name, "0.1.0", mcpserver.WithToolCapabilities(true))
	m.AddTools(tools...)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	hs := &http.Server{Handler: mcpserver.NewStreamableHTTPServer(m), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(l) }()
	return "http://" + l.Addr().String() + "/mcp", func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
	}, nil
}

// session is a held mcp-go session and the HTTP client it runs on.
type session struct {
	*client.Client
	hc *http.Client
}

// Close ends the session and closes its idle connections, which the mcp-go client leaves
// open: one dialled for a caller and never used holds a goroutine on both ends.
func (s *session) Close() error {
	err := s.Client.Close()
	s.hc.CloseIdleConnections()
	return err
}

// connect opens a held mcp-go session on url at protocol. Its HTTP client keeps enough idle
// connections for every caller, as a long-running agent's would.
func connect(ctx context.Context, url, protocol string) (*session, error) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute}}
	tr, err := transport.NewStreamableHTTP(url, transport.WithHTTPBasicClient(hc))
	if err != nil {
		return nil, err
	}
	var opts []client.ClientOption
	if protocol != mcp.LATEST_PROTOCOL_VERSION {
		opts = append(opts, client.WithProtocolVersion(protocol))
	}
	c := client.NewClient(tr, opts...)
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	ictx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = protocol
	req.Params.ClientInfo = mcp.Implementation{Name: "toolmesh-bench", Version: "0"}
	sess := &session{Client: c, hc: hc}
	if _, err := c.Initialize(ictx, req); err != nil {
		sess.Close()
		return nil, err
	}
	return sess, nil
}

// listAll lists every tool page by page: how many tools and pages.
func listAll(ctx context.Context, c *client.Client) (int, int, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req := mcp.ListToolsRequest{}
	n := 0
	for pages := 1; pages <= 1000; pages++ {
		res, err := c.ListToolsByPage(ctx, req)
		if err != nil {
			return 0, 0, fmt.Errorf("tools/list: %w", err)
		}
		n += len(res.Tools)
		if res.NextCursor == "" {
			return n, pages, nil
		}
		req.Params.Cursor = res.NextCursor
	}
	return 0, 0, errors.New("tools/list: more than 1000 pages")
}

// waitCatalog waits until /mcp lists want tools.
func waitCatalog(ctx context.Context, c *client.Client, want int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		n, _, err := listAll(ctx, c)
		if err == nil && n == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("/mcp lists %d tools (%v) after 2 minutes, want %d", n, err, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// startMesh runs the executor, retriever and api targets in this process with the MCP servers
// of cfg (an mcp.json), and returns the REST base URL once ready. Without overGRPC they call
// each other in the process, as `toolmesh up` does by default; with it the executor and
// retriever listen on loopback and the api calls them over gRPC, as when their addresses are
// given.
func startMesh(cfg string, overGRPC bool) (string, func(), error) {
	args := []string{"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--api.inference-addr=",
		"--drain-timeout=2s", "--mcp-config=" + cfg}
	if overGRPC {
		args = append(args, "--executor.grpc-addr=127.0.0.1:0", "--retriever.grpc-addr=127.0.0.1:0")
	}
	return inproc.Start("mcpface", args, []string{"executor", "retriever", "api"}, 2*time.Minute)
}
