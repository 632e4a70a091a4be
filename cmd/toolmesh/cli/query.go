package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

// queryGrace is how long past --timeout the client keeps waiting: the server stops the loop
// at the deadline and still has to send its "done" event saying so.
const queryGrace = 10 * time.Second

// How much of a progress line the model output, tool outputs and tool lists may take.
const (
	maxModelRunes  = 200
	maxOutputRunes = 200
	maxListedTools = 8
)

// queryRequest is the body of POST /v1/query and /v1/query:stream (QueryRequest and
// QueryStreamRequest have the same fields). Zero values are left out so the server's
// defaults apply.
type queryRequest struct {
	Query          string   `json:"query"`
	K              int      `json:"k,omitempty"`
	MaxIterations  int      `json:"max_iterations,omitempty"`
	Servers        []string `json:"servers,omitempty"`
	TimeoutSeconds int64    `json:"timeout_seconds,omitempty"`
}

// protoJSON reads the api's JSON; unknown fields are skipped so a newer server still works.
var protoJSON = protojson.UnmarshalOptions{DiscardUnknown: true}

func runQuery(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("query", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c client
	c.register(fs)
	// The common --timeout is the whole query's deadline here, which the server enforces.
	fs.Lookup("timeout").Usage = "bound the whole query (sent as timeout_seconds; the server allows 1s to 10m)"
	k := fs.Int("k", 0, "tools to retrieve per step, 1-50 (default: the server's, 4)")
	maxIter := fs.Int("max-iterations", 0, "at most this many steps, 1-32 (default: the server's, 8)")
	var servers listFlag
	fs.Var(&servers, "server", "only the tools of this `server` (repeat the flag, or separate names with commas)")
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: toolmesh query "TEXT" [flags]

Answers TEXT with the mesh's tools. Each step (tools retrieved, model output, tool calls and
results) is printed to stderr as it happens; the answer alone goes to stdout. Exits 1 when the
loop stops without answering (max iterations, deadline, error); what answer exists is printed.

Flags:
`)
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || strings.TrimSpace(pos[0]) == "" {
		return usageError(`usage: toolmesh query "TEXT" [-k N] [--max-iterations N] [--server S] [--timeout D]`)
	}
	if c.timeout <= 0 {
		return usageError("toolmesh query: --timeout must be positive, got %v", c.timeout)
	}
	c.init()
	req := queryRequest{
		Query:         pos[0],
		K:             *k,
		MaxIterations: *maxIter,
		Servers:       servers,
		// Rounded up so 1.5s is not cut to 1s; out of range is the server's to report.
		TimeoutSeconds: int64(math.Ceil(c.timeout.Seconds())),
	}
	// The deadline is on ctx rather than http.Client.Timeout so that it, like Ctrl-C, can be
	// told apart below.
	c.http.Timeout = 0
	qctx, cancel := context.WithTimeout(ctx, c.timeout+queryGrace)
	defer cancel()

	if c.asJSON {
		err = queryJSON(qctx, &c, req, stdout)
	} else {
		err = queryStream(qctx, &c, req, stdout, stderr)
	}
	var exit exitError
	switch {
	case err == nil, errors.As(err, &exit):
		return err
	case ctx.Err() != nil:
		return exitError{code: 1, msg: "toolmesh query: canceled"}
	case errors.Is(qctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("no reply within --timeout %v (plus %v for the server to report it): %w", c.timeout, queryGrace, err)
	}
	return err
}

// queryJSON prints the whole QueryResponse of POST /v1/query.
func queryJSON(ctx context.Context, c *client, req queryRequest, stdout io.Writer) error {
	data, err := c.do(ctx, http.MethodPost, "/v1/query", req)
	if err != nil {
		return err
	}
	if err := writeJSON(stdout, data); err != nil {
		return err
	}
	var resp toolmeshv1.QueryResponse
	if err := protoJSON.Unmarshal(data, &resp); err != nil {
		return fmt.Errorf("decode query response: %w", err)
	}
	return stopError(&resp)
}

// queryStream runs POST /v1/query:stream, printing progress to stderr and the answer to stdout.
func queryStream(ctx context.Context, c *client, req queryRequest, stdout, stderr io.Writer) error {
	body, err := c.stream(ctx, http.MethodPost, "/v1/query:stream", req)
	if err != nil {
		return err
	}
	defer body.Close()
	p := &progress{stdout: stdout, stderr: stderr}
	// Whatever happens, the answer printed so far ends its line before any message follows.
	defer p.endAnswer()
	sc := bufio.NewScanner(body)
	// A tool's output or the final answer can be large, and one event is one line.
	sc.Buffer(make([]byte, 0, 64<<10), maxBody)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		ev, err := decodeStreamLine(line)
		if err != nil {
			return err
		}
		if done := ev.GetDone(); done != nil {
			p.finish(done)
			return stopError(done)
		}
		p.event(ev)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("read query stream: an event is larger than %d MiB", maxBody>>20)
		}
		return fmt.Errorf("read query stream: %w", err)
	}
	return errors.New("the query stream ended before the query was done (did the api restart?)")
}

// decodeStreamLine reads one line of grpc-gateway's stream: {"result":{...}} for an event or
// {"error":{"code","message","details"}} when the stream failed.
func decodeStreamLine(line []byte) (*toolmeshv1.QueryStreamResponse, error) {
	var env struct {
		Result json.RawMessage `json:"result"`
		Error  *apiError       `json:"error"`
	}
	if err := json.Unmarshal(line, &env); err != nil {
		return nil, fmt.Errorf("the api sent a stream line that is not JSON (%q): %w", oneLine(string(line), 100), err)
	}
	if env.Error != nil {
		if env.Error.Message == "" {
			env.Error.Message = "stream failed"
		}
		return nil, fmt.Errorf("the query failed: %w", env.Error)
	}
	if len(env.Result) == 0 {
		return nil, fmt.Errorf("the api sent a stream line with neither result nor error: %q", oneLine(string(line), 100))
	}
	var ev toolmeshv1.QueryStreamResponse
	if err := protoJSON.Unmarshal(env.Result, &ev); err != nil {
		return nil, fmt.Errorf("decode query stream event: %w", err)
	}
	return &ev, nil
}

// stopError is nil when the loop answered and every tool call worked, and otherwise says why
// not (exit code 1): a script can tell a failed call from an answer.
func stopError(resp *toolmeshv1.QueryResponse) error {
	var why string
	failed := 0
	for _, c := range resp.GetToolCalls() {
		if c.GetIsError() {
			failed++
		}
	}
	switch resp.GetStopReason() {
	case toolmeshv1.StopReason_STOP_REASON_ANSWERED:
		if failed == 0 {
			return nil
		}
		return exitError{code: 1, msg: fmt.Sprintf("toolmesh query: answered, but %d of %d tool calls failed (see above)", failed, len(resp.GetToolCalls()))}
	case toolmeshv1.StopReason_STOP_REASON_TOOL_ERROR:
		why = fmt.Sprintf("the tool reported an error (%d of %d calls failed)", failed, len(resp.GetToolCalls()))
	case toolmeshv1.StopReason_STOP_REASON_MAX_ITERATIONS:
		why = fmt.Sprintf("max iterations reached after %d steps", resp.GetIterations())
	case toolmeshv1.StopReason_STOP_REASON_DEADLINE:
		why = "deadline reached (raise --timeout?)"
		if resp.GetError() != "" {
			why = "deadline reached: " + printable(resp.GetError())
		}
	case toolmeshv1.StopReason_STOP_REASON_ERROR:
		why = "error: " + printable(resp.GetError())
	default:
		why = fmt.Sprintf("no answer (stop reason %s)", resp.GetStopReason())
	}
	if resp.GetTraceId() != "" {
		why += " (trace " + resp.GetTraceId() + ")"
	}
	return exitError{code: 1, msg: "toolmesh query: stopped: " + why}
}

// progress prints the stream's events: steps to stderr, the answer to stdout. What the model,
// the tools and their servers wrote goes through printable: it reaches a terminal.
type progress struct {
	stdout, stderr io.Writer
	answer         strings.Builder // what has been printed of the answer
}

func (p *progress) event(ev *toolmeshv1.QueryStreamResponse) {
	switch e := ev.GetEvent().(type) {
	case *toolmeshv1.QueryStreamResponse_Retrieved:
		p.retrieved(e.Retrieved)
	case *toolmeshv1.QueryStreamResponse_ModelOutput:
		out := printable(oneLine(e.ModelOutput.GetModelOutput(), maxModelRunes))
		if out == "" {
			out = "(empty)"
		}
		fmt.Fprintf(p.stderr, "  model: %s\n", out)
	case *toolmeshv1.QueryStreamResponse_ToolCallStarted:
		fmt.Fprintf(p.stderr, "  calling %s %s\n", printable(e.ToolCallStarted.GetTool()), argsJSON(e.ToolCallStarted.GetArguments()))
	case *toolmeshv1.QueryStreamResponse_ToolCallFinished:
		r := e.ToolCallFinished
		verb := "result"
		if r.GetIsError() {
			verb = "error"
		}
		fmt.Fprintf(p.stderr, "  %s %s (%s): %s\n", verb, printable(r.GetTool()), formatMS(r.GetDurationMs()), printable(oneLine(r.GetOutput(), maxOutputRunes)))
	case *toolmeshv1.QueryStreamResponse_AnswerDelta:
		p.writeAnswer(e.AnswerDelta)
	}
	// Events this client does not know yet are skipped: a newer server may send more.
}

func (p *progress) retrieved(s *toolmeshv1.Step) {
	tools := s.GetRetrieved()
	var b strings.Builder
	fmt.Fprintf(&b, "step %d: retrieved %d tools", s.GetNumber(), len(tools))
	for i, t := range tools {
		if i == maxListedTools {
			fmt.Fprintf(&b, ", +%d more", len(tools)-i)
			break
		}
		sep := ", "
		if i == 0 {
			sep = ": "
		}
		fmt.Fprintf(&b, "%s%s (%.2f)", sep, printable(t.GetTool().GetId()), t.GetScore())
	}
	if d := s.GetDroppedToolIds(); len(d) > 0 {
		fmt.Fprintf(&b, "; %d dropped to fit the prompt: %s", len(d), printable(strings.Join(d, ", ")))
	}
	fmt.Fprintln(p.stderr, b.String())
}

// finish prints what the done event has of the answer beyond the streamed deltas (all of it
// when the server sent none).
func (p *progress) finish(done *toolmeshv1.QueryResponse) {
	if rest, ok := strings.CutPrefix(done.GetAnswer(), p.answer.String()); ok {
		p.writeAnswer(rest)
	}
	p.endAnswer()
}

func (p *progress) writeAnswer(s string) {
	if s == "" {
		return
	}
	p.answer.WriteString(s)
	_, _ = io.WriteString(p.stdout, printable(s))
}

// endAnswer ends the answer's last line, once.
func (p *progress) endAnswer() {
	if a := p.answer.String(); a != "" && !strings.HasSuffix(a, "\n") {
		p.writeAnswer("\n")
	}
}

// argsJSON shows a call's arguments as compact JSON with sorted keys.
func argsJSON(s *structpb.Struct) string {
	b, err := json.Marshal(s.AsMap())
	if err != nil {
		return "(arguments not JSON: " + err.Error() + ")"
	}
	// JSON escapes the C0 controls but not DEL, C1 or the bidi overrides.
	return printable(oneLine(string(b), maxOutputRunes))
}

func formatMS(ms float64) string {
	if ms >= 1000 {
		return fmt.Sprintf("%.2f s", ms/1000)
	}
	return fmt.Sprintf("%.1f ms", ms)
}
