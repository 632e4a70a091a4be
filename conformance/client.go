// Package conformance runs the official MCP conformance suite
// (@modelcontextprotocol/conformance) against toolmesh: its client scenarios
// against the executor's MCP client, through RunClient, and its server
// scenarios against the MCP servers toolmesh ships. The tests in this folder
// drive the suite; cmd/toolmesh-conformance is the client command it runs.
package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/services/executor"
)

// The suite tells the client command what to do through these variables; the
// server URL is the command's last argument.
const (
	EnvScenario        = "MCP_CONFORMANCE_SCENARIO"
	EnvProtocolVersion = "MCP_CONFORMANCE_PROTOCOL_VERSION"
	EnvContext         = "MCP_CONFORMANCE_CONTEXT"
)

// serverName is the name the scenario's server gets in the executor's
// configuration, so its tools are "conformance.TOOL".
const serverName = "conformance"

// ClientOptions describe one run of the conformance client.
type ClientOptions struct {
	// URL is the scenario server's streamable HTTP endpoint.
	URL string
	// Scenario names the scenario; it decides which tools are called.
	Scenario string
	// ProtocolVersion, when set, is pinned in the server's configuration the
	// way a user pins it (mcp.json "protocolVersion"); empty negotiates.
	ProtocolVersion string
	// Context is the scenario's MCP_CONFORMANCE_CONTEXT JSON, if any.
	Context string
	// Out receives one line per listed tool and per call result; nil discards.
	Out io.Writer
	// Logger receives the executor's logs; nil discards them.
	Logger *slog.Logger
	// Timeout bounds the whole run; zero means 20 s (the suite's own
	// per-scenario limit is 30 s).
	Timeout time.Duration
	// ConnectRetry is how long the executor may go on retrying a failed
	// connection before the run fails; zero means 3 s.
	ConnectRetry time.Duration
}

// Main is the client command: the suite runs it with the scenario server's
// URL as the last argument and the scenario in the environment. It returns
// the process exit code. Logs (the executor's, at debug level) go to stderr,
// where the suite keeps them next to the scenario's checks.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintf(stderr, "usage: toolmesh-conformance SERVER_URL  (the scenario in $%s)\n", EnvScenario)
		return 2
	}
	opts := optionsFromEnv(args[len(args)-1], getenv)
	opts.Out = stdout
	opts.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if err := RunClient(ctx, opts); err != nil {
		fmt.Fprintln(stderr, "toolmesh-conformance:", err)
		return 1
	}
	return 0
}

// optionsFromEnv reads the suite's variables; url is the command's argument.
func optionsFromEnv(url string, getenv func(string) string) ClientOptions {
	return ClientOptions{
		URL:             url,
		Scenario:        getenv(EnvScenario),
		ProtocolVersion: getenv(EnvProtocolVersion),
		Context:         getenv(EnvContext),
	}
}

// RunClient connects toolmesh's executor to the scenario's server, configured
// as a user configures a streamable HTTP server, lists its tools and makes the
// calls the scenario expects of a tools-only client. Everything goes through
// the executor's public API (ListTools, CallTool), so the catalog, argument
// validation and session handling under test are the ones users get.
func RunClient(ctx context.Context, opts ClientOptions) error {
	if opts.URL == "" {
		return errors.New("conformance client: no server URL")
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.Timeout == 0 {
		opts.Timeout = 20 * time.Second
	}
	if opts.ConnectRetry == 0 {
		opts.ConnectRetry = 3 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()

	srv := mcpconfig.Server{
		Name:            serverName,
		Transport:       mcpconfig.TransportStreamableHTTP,
		URL:             opts.URL,
		ProtocolVersion: opts.ProtocolVersion,
	}
	svc, err := executor.New(executor.Config{
		Servers:        map[string]mcpconfig.Server{serverName: srv},
		ConnectTimeout: 10 * time.Second,
	}, opts.Logger, nil)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = svc.Run(runCtx)
	}()
	// Stop the executor before returning, so the session ends the way it
	// does when toolmesh shuts down.
	defer func() {
		stop()
		<-done
	}()

	if err := waitConnected(ctx, svc, opts.ConnectRetry); err != nil {
		return err
	}
	lt, err := svc.ListTools(ctx, &toolmeshv1.ExecutorServiceListToolsRequest{Server: serverName})
	if err != nil {
		return fmt.Errorf("list tools: %w", err)
	}
	tools := lt.GetTools()
	for _, t := range tools {
		fmt.Fprintf(opts.Out, "tool %s\n", t.GetId())
	}

	calls, err := plan(opts.Scenario, opts.Context, tools)
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range calls {
		args, err := structpb.NewStruct(c.Arguments)
		if err != nil {
			errs = append(errs, fmt.Errorf("call %s: arguments: %w", c.Name, err))
			continue
		}
		res, err := svc.CallTool(ctx, &toolmeshv1.ExecutorServiceCallToolRequest{
			ToolId:    serverName + "." + c.Name,
			Arguments: args,
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("call %s: %w", c.Name, err))
			continue
		}
		res.DurationMs = 0
		b, _ := protojson.Marshal(res)
		fmt.Fprintf(opts.Out, "call %s: %s\n", c.Name, b)
	}
	return errors.Join(errs...)
}

// waitConnected waits until the executor's session is READY. A failed
// attempt is retried by the executor's own reconnect loop, with its backoff,
// as in production (a scenario server that is slow to answer under load gets
// another chance); once retry has failed to connect for that long, the last
// error is the answer. A scenario that rejects the client for good (an OAuth
// scenario, say) therefore ends after retry rather than at the suite's
// timeout.
func waitConnected(ctx context.Context, svc *executor.Service, retry time.Duration) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var failingSince time.Time
	for {
		ls, err := svc.ListServers(ctx, &toolmeshv1.ExecutorServiceListServersRequest{})
		if err != nil {
			return err
		}
		for _, s := range ls.GetServers() {
			switch s.GetState() {
			case toolmeshv1.ServerState_SERVER_STATE_READY, toolmeshv1.ServerState_SERVER_STATE_DEGRADED:
				return nil
			case toolmeshv1.ServerState_SERVER_STATE_UNHEALTHY:
				if failingSince.IsZero() {
					failingSince = time.Now()
				}
				if time.Since(failingSince) >= retry {
					return fmt.Errorf("connect to %s: %s", s.GetEndpoint(), s.GetLastError())
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("connect: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// toolCall is one tools/call the scenario expects.
type toolCall struct {
	Name      string         `json:"name"`
	Arguments map[string]any `json:"arguments"`
}

// plan returns the calls a tools-only client makes in scenario, given the
// tools the executor listed. Scenarios that pass their calls in
// MCP_CONFORMANCE_CONTEXT ("toolCalls") get those; the others are named
// here; any other scenario only connects and lists tools.
func plan(scenario, rawContext string, tools []*toolmeshv1.Tool) ([]toolCall, error) {
	if rawContext != "" {
		var sc struct {
			ToolCalls []toolCall `json:"toolCalls"`
		}
		if err := json.Unmarshal([]byte(rawContext), &sc); err != nil {
			return nil, fmt.Errorf("%s: %w", EnvContext, err)
		}
		if len(sc.ToolCalls) > 0 {
			return sc.ToolCalls, nil
		}
	}
	byName := map[string]*toolmeshv1.Tool{}
	for _, t := range tools {
		byName[t.GetName()] = t
	}
	switch scenario {
	case "tools_call":
		return []toolCall{{Name: "add_numbers", Arguments: map[string]any{"a": 5, "b": 3}}}, nil
	case "sse-retry":
		return []toolCall{{Name: "test_reconnection", Arguments: map[string]any{}}}, nil
	case "json-schema-2020-12-preservation":
		// Hand back the input schema as the catalog holds it: what the model
		// and the validation see.
		focal := byName["json_schema_2020_12_tool"]
		if focal == nil {
			return nil, fmt.Errorf("%s: tool json_schema_2020_12_tool not listed", scenario)
		}
		return []toolCall{{Name: "json_schema_echo", Arguments: map[string]any{"schema": focal.GetInputSchema().AsMap()}}}, nil
	case "http-standard-headers", "http-invalid-tool-headers", "request-metadata":
		// Call every tool the catalog kept: these scenarios look at the
		// headers of the calls and at which tools were called.
		names := make([]string, 0, len(tools))
		for _, t := range tools {
			names = append(names, t.GetName())
		}
		sort.Strings(names)
		var out []toolCall
		for _, n := range names {
			out = append(out, toolCall{Name: n, Arguments: sampleArguments(byName[n].GetInputSchema().AsMap())})
		}
		return out, nil
	}
	if strings.HasPrefix(scenario, "auth/") {
		return nil, fmt.Errorf("%s: toolmesh's MCP client does not do OAuth", scenario)
	}
	return nil, nil
}

// sampleArguments returns a value for each required property of a flat
// object schema, typed as the property says, so that a call passes the
// executor's validation; the scenarios that use it do not look at the values.
func sampleArguments(schema map[string]any) map[string]any {
	args := map[string]any{}
	props, _ := schema["properties"].(map[string]any)
	required, _ := schema["required"].([]any)
	for _, r := range required {
		name, _ := r.(string)
		prop, _ := props[name].(map[string]any)
		switch prop["type"] {
		case "integer", "number":
			args[name] = 1
		case "boolean":
			args[name] = true
		case "array":
			args[name] = []any{}
		case "object":
			args[name] = map[string]any{}
		default:
			args[name] = "conformance"
		}
	}
	return args
}
