package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/audit"
	"github.com/toolmesh/toolmesh/internal/auth"
	"github.com/toolmesh/toolmesh/internal/chatcheck"
	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/policy"
	"github.com/toolmesh/toolmesh/internal/searchbounds"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/toolid"
)

// inferenceClient is the part of the inference service the loop needs.
type inferenceClient interface {
	Generate(ctx context.Context, in *toolmeshv1.GenerateRequest, opts ...grpc.CallOption) (*toolmeshv1.GenerateResponse, error)
	ComposeAnswer(ctx context.Context, in *toolmeshv1.ComposeAnswerRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[toolmeshv1.ComposeAnswerResponse], error)
	GetModelStatus(ctx context.Context, in *toolmeshv1.GetModelStatusRequest, opts ...grpc.CallOption) (*toolmeshv1.GetModelStatusResponse, error)
}

const (
	defaultMaxIterations = 8
	maxMaxIterations     = 32
	maxTimeoutSeconds    = 600
	// retrievalQueryBytes bounds the text searched for from the second step on: the question
	// plus the calls of the step before.
	retrievalQueryBytes = 1024
)

// errQueryDeadline is the cause of a query's context ending at its own deadline, as opposed
// to the client going away.
var errQueryDeadline = errors.New("query deadline")

// startHint tells a user without a model what to do, when the inference service does not say
// more precisely (it is unreachable, or not configured).
const startHint = "run `toolmesh up --model gorilla-openfunctions-v2` (it downloads the model once and runs llama-server with it), " +
	"or start llama-server yourself and pass --llm-url; tool search and direct calls like @calculator.add({\"a\":2,\"b\":3}) work without one"

type agentHandler struct {
	toolmeshv1.UnimplementedAgentServiceServer
	cfg       Config
	logger    *slog.Logger
	executor  executorClient
	retriever retrieverClient // nil: no retriever configured
	inference inferenceClient // nil: no inference configured
	policy    *policy.Policy
	rules     *serverRules // the executor's rules, which the policy decides by
	guard     *auth.Guard  // charges each tool call to the caller's rate limit
	trail     *trail
	turns     *turnMemory
	models    modelCache

	tracer   trace.Tracer
	payloads telemetry.PayloadPolicy
	queries  metric.Float64Histogram
	calls    metric.Int64Counter
}

func newAgentHandler(cfg Config, logger *slog.Logger, tel *telemetry.Service, executor executorClient) *agentHandler {
	h := &agentHandler{cfg: cfg, logger: logger, executor: executor, turns: newTurnMemory(),
		tracer: tel.Tracer("github.com/toolmesh/toolmesh/services/api")}
	if tel != nil {
		h.payloads = tel.Payloads
	}
	meter := tel.Meter("github.com/toolmesh/toolmesh/services/api")
	var err error
	if h.queries, err = meter.Float64Histogram("toolmesh.query.duration", metric.WithUnit("s"),
		metric.WithDescription("Time to answer a query, by stop reason."),
		metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)); err != nil {
		h.queries, _ = metricnoop.Meter{}.Float64Histogram("")
	}
	if h.calls, err = meter.Int64Counter("toolmesh.query.tool_calls", metric.WithDescription("Tool calls made by queries, by tool and outcome.")); err != nil {
		h.calls, _ = metricnoop.Meter{}.Int64Counter("")
	}
	return h
}

// query is a checked request: the same for Query and QueryStream.
type query struct {
	text          string
	k             int32
	maxIterations int
	servers       []string
	timeout       time.Duration
	// direct: text is a list of @SERVER.TOOL calls, run without a model.
	direct bool
	// conv is the conversation: the turns before the question, and this turn's rounds of the
	// caller's function calls.
	conv       conversation
	functions  []*toolmeshv1.Function
	choice     toolmeshv1.ToolChoiceMode
	choiceFn   string
	generation *toolmeshv1.GenerationOptions
	model      string
}

// queryParams are the fields QueryRequest and QueryStreamRequest share.
type queryParams interface {
	GetQuery() string
	GetK() int32
	GetMaxIterations() int32
	GetServers() []string
	GetTimeoutSeconds() int32
	GetMessages() []*toolmeshv1.Message
	GetFunctions() []*toolmeshv1.Function
	GetToolChoice() *toolmeshv1.ToolChoice
	GetGeneration() *toolmeshv1.GenerationOptions
	GetModel() string
}

func (h *agentHandler) check(req queryParams) (query, error) {
	text := req.GetQuery()
	k, maxIterations, timeoutSeconds := req.GetK(), req.GetMaxIterations(), req.GetTimeoutSeconds()
	conv, err := splitConversation(text, req.GetMessages())
	if err != nil {
		return query{}, err
	}
	qf := conv.questionField
	switch q := conv.question; {
	case strings.TrimSpace(q) == "":
		return query{}, errreason.InvalidField(qf, "is required")
	case len(q) > searchbounds.MaxQueryBytes:
		return query{}, errreason.InvalidField(qf, fmt.Sprintf("is %d bytes, more than the %d allowed", len(q), searchbounds.MaxQueryBytes))
	case !utf8.ValidString(q):
		return query{}, errreason.InvalidField(qf, "is not valid UTF-8")
	case k < 0 || k > searchbounds.MaxK:
		return query{}, errreason.InvalidField("k", fmt.Sprintf("must be between 1 and %d", searchbounds.MaxK))
	case maxIterations < 0 || maxIterations > maxMaxIterations:
		return query{}, errreason.InvalidField("max_iterations", fmt.Sprintf("must be between 1 and %d", maxMaxIterations))
	case timeoutSeconds < 0 || timeoutSeconds > maxTimeoutSeconds:
		return query{}, errreason.InvalidField("timeout_seconds", fmt.Sprintf("must be between 1 and %d", maxTimeoutSeconds))
	}
	for i, s := range req.GetServers() {
		if !toolid.ValidServer(s) {
			return query{}, errreason.InvalidField(fmt.Sprintf("servers[%d]", i), "must match "+toolid.ServerRule)
		}
	}
	if err := chatcheck.Functions(req.GetFunctions()); err != nil {
		return query{}, err
	}
	if err := chatcheck.Generation(req.GetGeneration()); err != nil {
		return query{}, err
	}
	if m := req.GetModel(); len(m) > 256 || !utf8.ValidString(m) {
		return query{}, errreason.InvalidField("model", "must be valid UTF-8 of at most 256 bytes")
	}
	q := query{text: conv.question, k: k, maxIterations: int(maxIterations), servers: req.GetServers(), timeout: h.cfg.QueryTimeout,
		conv: conv, functions: req.GetFunctions(), generation: req.GetGeneration(), model: req.GetModel()}
	// A question of the old shape (no conversation, no functions) may name its calls itself.
	q.direct = isDirect(text) && len(req.GetMessages()) == 0 && len(req.GetFunctions()) == 0
	switch tc := req.GetToolChoice(); tc.GetMode() {
	case toolmeshv1.ToolChoiceMode_TOOL_CHOICE_MODE_UNSPECIFIED, toolmeshv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO:
		q.choice = toolmeshv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO
	case toolmeshv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE, toolmeshv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED:
		q.choice = tc.GetMode()
	case toolmeshv1.ToolChoiceMode_TOOL_CHOICE_MODE_FUNCTION:
		if !slices.ContainsFunc(q.functions, func(f *toolmeshv1.Function) bool { return f.GetName() == tc.GetFunction() }) {
			return query{}, errreason.InvalidField("tool_choice.function", fmt.Sprintf("%q is none of the request's functions", truncateUTF8(tc.GetFunction(), 64)))
		}
		q.choice, q.choiceFn = tc.GetMode(), tc.GetFunction()
	default:
		return query{}, errreason.InvalidField("tool_choice.mode", fmt.Sprintf("%d is not a tool choice mode", tc.GetMode()))
	}
	if tc := req.GetToolChoice(); tc.GetFunction() != "" && q.choice != toolmeshv1.ToolChoiceMode_TOOL_CHOICE_MODE_FUNCTION {
		return query{}, errreason.InvalidField("tool_choice.function", "is only for mode TOOL_CHOICE_MODE_FUNCTION")
	}
	if q.k == 0 {
		q.k = searchbounds.DefaultK
	}
	if q.maxIterations == 0 {
		q.maxIterations = defaultMaxIterations
	}
	if timeoutSeconds > 0 {
		q.timeout = time.Duration(timeoutSeconds) * time.Second
	}
	return q, nil
}

func (h *agentHandler) Query(ctx context.Context, req *toolmeshv1.QueryRequest) (*toolmeshv1.QueryResponse, error) {
	q, err := h.check(req)
	if err != nil {
		return nil, err
	}
	return h.run(ctx, q, nil)
}

func (h *agentHandler) QueryStream(req *toolmeshv1.QueryStreamRequest, stream grpc.ServerStreamingServer[toolmeshv1.QueryStreamResponse]) error {
	q, err := h.check(req)
	if err != nil {
		return err
	}
	resp, err := h.run(stream.Context(), q, stream.Send)
	if err != nil {
		return err
	}
	return stream.Send(&toolmeshv1.QueryStreamResponse{Event: &toolmeshv1.QueryStreamResponse_Done{Done: resp}})
}

// run answers one query. send, when not nil, receives each event as it happens; when it
// fails (the client went away) the loop stops. Failures after work was done end the loop
// with a stop reason and the work so far; failures before it are errors.
func (h *agentHandler) run(ctx context.Context, q query, send func(*toolmeshv1.QueryStreamResponse) error) (_ *toolmeshv1.QueryResponse, err error) {
	ctx, span := h.tracer.Start(ctx, "invoke_agent toolmesh", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.String("gen_ai.operation.name", "invoke_agent"), attribute.String("gen_ai.agent.name", "toolmesh"),
			attribute.Int("gen_ai.request.top_k", int(q.k)), attribute.Int("toolmesh.query.max_iterations", q.maxIterations),
			attribute.Bool("toolmesh.query.direct", q.direct), attribute.Int("toolmesh.query.messages", len(q.conv.earlier)),
			attribute.Int("toolmesh.query.functions", len(q.functions))))
	if q.model != "" {
		span.SetAttributes(attribute.String("gen_ai.request.model", q.model))
	}
	start := time.Now()
	ctx, cancelDeadline := context.WithTimeoutCause(ctx, q.timeout, errQueryDeadline)
	defer cancelDeadline()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r := &runner{h: h, q: q, resp: &toolmeshv1.QueryResponse{}, caller: caller(ctx, q.servers), began: start, seen: h.trail.seenOf(ctx)}
	if sc := span.SpanContext(); sc.HasTraceID() {
		r.resp.TraceId = sc.TraceID().String()
	}
	defer func() {
		r.resp.DurationMs = millis(time.Since(start))
		h.finish(ctx, span, start, r.resp, err)
	}()
	if send != nil {
		r.send = func(ev *toolmeshv1.QueryStreamResponse) {
			// Calls of one step finish concurrently; a stream takes one Send at a time.
			r.mu.Lock()
			defer r.mu.Unlock()
			if err := send(ev); err != nil {
				cancel(fmt.Errorf("sending to the client: %w", err))
			}
		}
	} else {
		r.send = func(*toolmeshv1.QueryStreamResponse) {}
	}
	if err := checkServerNames(ctx, h.executor, h.policy, h.cfg, r.caller, "servers", r.caller.Servers); err != nil {
		return nil, err
	}
	if q.direct {
		h.rules.ensure(ctx) // the policy refuses the calls while it has no rules
		return r.direct(ctx)
	}
	if d := h.policy.Ask(r.caller); d != nil {
		return nil, h.policy.Record(ctx, d)
	}
	// Without the servers' rules every tool would be withheld from the model, which would then
	// answer as if there were none: the question is refused instead, saying why.
	if err := h.rules.ready(ctx, policy.Query); err != nil {
		return nil, err
	}
	switch {
	case h.inference == nil:
		return nil, status.Error(codes.Unavailable, "answering questions needs an inference backend and none is configured (set --api.inference-addr); "+startHint)
	case h.retriever == nil:
		return nil, status.Error(codes.Unavailable, "answering questions needs a retriever and none is configured (set --api.retriever-addr)")
	}
	if q.model != "" {
		if err := h.checkModel(ctx, q.model); err != nil {
			return nil, err
		}
	}
	if err := r.checkClashes(ctx); err != nil {
		return nil, err
	}
	r.turn = h.turns.turnHistory(r.caller.Token, q.conv.rounds)
	return r.loop(ctx)
}

// finish ends the query's span and records its metrics.
func (h *agentHandler) finish(ctx context.Context, span trace.Span, start time.Time, resp *toolmeshv1.QueryResponse, err error) {
	stop := strings.ToLower(strings.TrimPrefix(resp.GetStopReason().String(), "STOP_REASON_"))
	if err != nil {
		stop = "failed"
		span.SetStatus(otelcodes.Error, status.Convert(err).Message())
		span.SetAttributes(attribute.String("error.type", status.Code(err).String()))
	} else if resp.GetStopReason() == toolmeshv1.StopReason_STOP_REASON_ERROR || resp.GetStopReason() == toolmeshv1.StopReason_STOP_REASON_DEADLINE {
		span.SetStatus(otelcodes.Error, resp.GetError())
		span.SetAttributes(attribute.String("error.type", stop))
	}
	span.SetAttributes(attribute.String("toolmesh.query.stop_reason", stop), attribute.Int("toolmesh.query.iterations", int(resp.GetIterations())),
		attribute.Int("toolmesh.query.tool_calls", len(resp.GetToolCalls())))
	if u := resp.GetUsage(); u != nil {
		span.SetAttributes(attribute.Int("gen_ai.usage.input_tokens", int(u.GetPromptTokens())), attribute.Int("gen_ai.usage.output_tokens", int(u.GetCompletionTokens())))
	}
	if resp.GetModel() != "" {
		span.SetAttributes(attribute.String("gen_ai.response.model", resp.GetModel()))
	}
	if fr := resp.GetFinishReason(); fr != "" {
		span.SetAttributes(attribute.StringSlice("gen_ai.response.finish_reasons", []string{fr}))
	}
	span.End()
	h.queries.Record(context.WithoutCancel(ctx), time.Since(start).Seconds(), metric.WithAttributes(attribute.String("toolmesh.query.stop_reason", stop)))
}

// runner is the state of one query.
type runner struct {
	h      *agentHandler
	q      query
	caller policy.Caller
	resp   *toolmeshv1.QueryResponse
	send   func(*toolmeshv1.QueryStreamResponse)
	// ran counts the calls run so far, against cfg.MaxToolCalls; lastRun are those the
	// last step ran (not those it refused).
	ran     int
	lastRun []*toolmeshv1.ToolCallRecord
	mu      sync.Mutex
	// down is set when the executor itself could not be reached: that is no tool's error
	// to feed back to the model, and the query ends with it.
	down error
	// failed holds the status of each call the executor refused or could not complete (an
	// unknown tool, invalid arguments, a timeout...), as opposed to a tool that ran and
	// reported an error: a direct query answers with it, as POST .../TOOL:call does.
	failed map[*toolmeshv1.ToolCallRecord]error

	// began is when the query started: the response's timings count from it.
	began time.Time
	// seen is where the query came from, for the audit trail.
	seen seen
	// turn is what this turn called before this request: the caller's functions with their
	// results, and the mesh calls of the requests that returned them (turnMemory).
	turn []*toolmeshv1.ToolCallRecord
}

func (r *runner) loop(ctx context.Context) (*toolmeshv1.QueryResponse, error) {
	var modelAnswer string
	for n := 1; n <= r.q.maxIterations; n++ {
		resp, done, err := r.step(ctx, n, &modelAnswer)
		if done {
			return resp, err
		}
	}
	r.resp.StopReason = toolmeshv1.StopReason_STOP_REASON_MAX_ITERATIONS
	return r.compose(ctx, modelAnswer)
}

// step runs iteration n: retrieve, ask the model, call the tools. It returns true when the
// loop ends here, with the response or error the query ends with.
func (r *runner) step(ctx context.Context, n int, modelAnswer *string) (*toolmeshv1.QueryResponse, bool, error) {
	h := r.h
	ctx, span := h.tracer.Start(ctx, fmt.Sprintf("step %d", n), trace.WithAttributes(attribute.Int("toolmesh.step.number", n)))
	defer span.End()
	step := &toolmeshv1.Step{Number: int32(n)}
	r.resp.Steps = append(r.resp.Steps, step)
	r.resp.Iterations = int32(n)

	t := time.Now()
	var found []*toolmeshv1.ScoredTool
	var err error
	if r.searches(n) {
		k := r.q.k
		found, err = r.retrieve(ctx, k)
		if err == nil && len(found) == int(k) && len(r.offer(ctx, found, false)) < int(k) && k < searchbounds.MaxK {
			// The policy withholds some of the k from the model: search for twice as many so the
			// rest of the k take their place.
			k = min(2*k, searchbounds.MaxK)
			found, err = r.retrieve(ctx, k)
		}
	}
	step.RetrievalStartMs, step.RetrievalMs = r.timed(t)
	if err != nil {
		resp, err := r.fail(ctx, err, n, "retrieving tools")
		return resp, true, err
	}
	step.Retrieved = r.offer(ctx, found, true)
	span.SetAttributes(attribute.Int("toolmesh.step.tools_retrieved", len(step.Retrieved)),
		attribute.Int("toolmesh.step.tools_withheld", len(found)-len(step.Retrieved)))
	r.send(&toolmeshv1.QueryStreamResponse{Event: &toolmeshv1.QueryStreamResponse_Retrieved{Retrieved: step}})

	t = time.Now()
	functions := r.functionsFor(n)
	gen, err := h.inference.Generate(ctx, &toolmeshv1.GenerateRequest{
		Query: r.q.text, Tools: step.GetRetrieved(), History: r.history(),
		Messages: r.q.conv.earlier, Functions: functions, Generation: r.q.generation,
		RequireCall: n == 1 && (r.q.choice == toolmeshv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED || r.q.choice == toolmeshv1.ToolChoiceMode_TOOL_CHOICE_MODE_FUNCTION),
	})
	step.ModelStartMs, step.ModelMs = r.timed(t)
	if err != nil {
		resp, err := r.fail(ctx, r.inferenceError(ctx, err), n, "asking the model")
		return resp, true, err
	}
	h.models.set(gen.GetModel())
	r.resp.Model = gen.GetModel()
	step.ModelOutput = gen.GetRawOutput()
	step.Usage = gen.GetUsage()
	step.DroppedToolIds = gen.GetDroppedToolIds()
	step.History = gen.GetHistory()
	r.addUsage(gen.GetUsage())
	r.send(&toolmeshv1.QueryStreamResponse{Event: &toolmeshv1.QueryStreamResponse_ModelOutput{ModelOutput: step}})

	if len(gen.GetCalls()) == 0 {
		r.resp.StopReason = toolmeshv1.StopReason_STOP_REASON_ANSWERED
		if len(r.resp.GetToolCalls()) == 0 && len(r.turn) == 0 {
			// Nothing was called: the model's text is the whole answer.
			r.resp.Answer = gen.GetAnswer()
			r.resp.FinishReason = finishReason(gen.GetFinishReason())
			r.send(&toolmeshv1.QueryStreamResponse{Event: &toolmeshv1.QueryStreamResponse_AnswerDelta{AnswerDelta: r.resp.Answer}})
			return r.resp, true, nil
		}
		resp, err := r.compose(ctx, gen.GetAnswer())
		return resp, true, err
	}
	*modelAnswer = gen.GetAnswer()
	var calls []*toolmeshv1.ToolCallRecord
	var fnCalls []*toolmeshv1.FunctionCall
	for _, c := range gen.GetCalls() {
		if isFunction(c.GetToolId()) && offersFunction(functions, c.GetToolId()) {
			fnCalls = append(fnCalls, &toolmeshv1.FunctionCall{ToolId: c.GetToolId(), Arguments: c.GetArguments(), Id: newCallID()})
			continue
		}
		calls = append(calls, &toolmeshv1.ToolCallRecord{Tool: c.GetToolId(), Arguments: c.GetArguments()})
	}
	run, undo := r.admit(ctx, step, calls)
	span.SetAttributes(attribute.Int("toolmesh.step.tool_calls", len(calls)), attribute.Int("toolmesh.step.tool_calls_run", len(run)),
		attribute.Int("toolmesh.step.function_calls", len(fnCalls)))
	if err := h.guard.Charge(ctx, len(run)); err != nil {
		undo()
		r.refused(ctx, run, audit.OriginModel, "api.rate-limit")
		resp, err := r.fail(ctx, err, n, "calling tools")
		return resp, true, err
	}
	r.execute(ctx, n, calls, run, true)
	if ctx.Err() != nil {
		resp, err := r.fail(ctx, ctx.Err(), n, "calling tools")
		return resp, true, err
	}
	if r.down != nil {
		resp, err := r.fail(ctx, r.down, n, "calling tools")
		return resp, true, err
	}
	if cut := r.fitStep(calls); cut > 0 {
		span.SetAttributes(attribute.Int("toolmesh.step.outputs_cut", cut))
	}
	if len(fnCalls) > 0 {
		// The caller runs its functions; the turn goes on in its next request, which will
		// show the model this request's mesh calls too (turnMemory).
		r.resp.StopReason = toolmeshv1.StopReason_STOP_REASON_FUNCTION_CALLS
		r.resp.FinishReason = "tool_calls"
		r.resp.FunctionCalls = fnCalls
		r.resp.Answer = gen.GetAnswer()
		h.turns.remember(r.caller.Token, fnCalls[0].GetId(), int32(n), r.resp.GetToolCalls())
		return r.resp, true, nil
	}
	if r.ran >= h.cfg.MaxToolCalls {
		r.resp.StopReason = toolmeshv1.StopReason_STOP_REASON_MAX_ITERATIONS
		r.resp.Error = fmt.Sprintf("stopped at the query's limit of %d tool calls (api.max-tool-calls)", h.cfg.MaxToolCalls)
		resp, err := r.compose(ctx, *modelAnswer)
		return resp, true, err
	}
	return nil, false, nil
}

// searches says whether step n offers the mesh's tools: not when the caller said the model
// calls nothing, or names the one function it must call.
func (r *runner) searches(n int) bool {
	switch r.q.choice {
	case toolmeshv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE:
		return false
	case toolmeshv1.ToolChoiceMode_TOOL_CHOICE_MODE_FUNCTION:
		return n > 1
	}
	return true
}

// functionsFor is the caller's functions step n offers.
func (r *runner) functionsFor(n int) []*toolmeshv1.Function {
	switch r.q.choice {
	case toolmeshv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE:
		return nil
	case toolmeshv1.ToolChoiceMode_TOOL_CHOICE_MODE_FUNCTION:
		if n == 1 {
			for _, f := range r.q.functions {
				if f.GetName() == r.q.choiceFn {
					return []*toolmeshv1.Function{f}
				}
			}
		}
	}
	return r.q.functions
}

func offersFunction(fns []*toolmeshv1.Function, name string) bool {
	return slices.ContainsFunc(fns, func(f *toolmeshv1.Function) bool { return f.GetName() == name })
}

// history is what the model has seen called in this turn: the turn's earlier requests, then
// this one's calls.
func (r *runner) history() []*toolmeshv1.ToolCallRecord {
	if len(r.turn) == 0 {
		return r.resp.GetToolCalls()
	}
	return slices.Concat(r.turn, r.resp.GetToolCalls())
}

// addUsage adds one model turn's tokens to the query's.
func (r *runner) addUsage(u *toolmeshv1.Usage) {
	if u == nil {
		return
	}
	if r.resp.Usage == nil {
		r.resp.Usage = &toolmeshv1.Usage{}
	}
	r.resp.Usage.PromptTokens += u.GetPromptTokens()
	r.resp.Usage.CompletionTokens += u.GetCompletionTokens()
}

// finishReason is an answer's finish reason as OpenAI names it; a backend that did not say
// stopped on its own.
func finishReason(fr string) string {
	if fr == "length" {
		return "length"
	}
	return "stop"
}

// retrieve searches for k of the step's tools among the servers both the request and the
// caller's scope allow.
func (r *runner) retrieve(ctx context.Context, k int32) ([]*toolmeshv1.ScoredTool, error) {
	servers, ok := r.h.policy.Within(r.caller, policy.Call, r.q.servers)
	if !ok {
		return nil, nil // the caller may call none of the servers: the model answers without tools
	}
	sctx, cancel := context.WithTimeout(ctx, r.h.cfg.RPCTimeout)
	defer cancel()
	found, err := r.h.retriever.SearchTools(sctx, &toolmeshv1.RetrieverServiceSearchToolsRequest{
		Query: r.retrievalQuery(), K: k, Servers: servers,
	})
	switch {
	case status.Code(err) == codes.InvalidArgument:
		// A question with no searchable words ("Who are you?") matches no tool; the
		// model answers it with none.
		return nil, nil
	case err != nil:
		return nil, dependencyError(sctx, "retriever", r.h.cfg.RetrieverAddr, err)
	}
	return found.GetResults(), nil
}

// offer keeps the first k of found that the policy lets the model be offered; when record is
// set, each one withheld is counted and marked on the step's span.
func (r *runner) offer(ctx context.Context, found []*toolmeshv1.ScoredTool, record bool) []*toolmeshv1.ScoredTool {
	out := make([]*toolmeshv1.ScoredTool, 0, min(len(found), int(r.q.k)))
	for _, f := range found {
		if len(out) == int(r.q.k) {
			break
		}
		if d := r.h.policy.Offer(r.caller, f.GetTool()); d != nil {
			if record {
				r.h.policy.Record(ctx, d)
			}
			continue
		}
		out = append(out, f)
	}
	return out
}

// admit decides which of the model's calls in step run, and records why each other one does
// not: a tool the step did not offer (the model's output is no authority: text a tool returned
// may have asked for it), the policy, the step's limit and the query's, and the tool's rate
// limit for the caller. A call over its rate limit is a tool error the model reads (it may
// answer without it, or call another tool), not a refusal of the question: the question is
// within the caller's limits, the model's choice of call is not the caller's. It returns the
// calls to run, in order, and what gives back their rate limits should they not run after all.
func (r *runner) admit(ctx context.Context, step *toolmeshv1.Step, calls []*toolmeshv1.ToolCallRecord) ([]*toolmeshv1.ToolCallRecord, func()) {
	offered := make(map[string]bool, len(step.GetRetrieved()))
	for _, t := range step.GetRetrieved() {
		offered[t.GetTool().GetId()] = true
	}
	cfg := r.h.cfg
	var run []*toolmeshv1.ToolCallRecord
	var undos []func()
	for _, c := range calls {
		d := r.h.policy.Call(r.caller, c.GetTool())
		if d == nil && !offered[c.GetTool()] {
			d = &policy.Denial{Action: policy.Call, Tool: c.GetTool(), Rule: policy.RuleOffered,
				Reason: fmt.Sprintf("step %d did not offer it to the model", step.GetNumber())}
		}
		switch {
		case d != nil:
			r.h.policy.Record(ctx, d)
			c.IsError, c.Output = true, d.Error()
			r.refused(ctx, []*toolmeshv1.ToolCallRecord{c}, audit.OriginModel, string(d.Rule))
		case len(run) == cfg.MaxStepCalls:
			c.IsError, c.Output = true, fmt.Sprintf("not run: a step runs at most %d calls (api.max-step-calls)", cfg.MaxStepCalls)
			r.refused(ctx, []*toolmeshv1.ToolCallRecord{c}, audit.OriginModel, "api.max-step-calls")
		case r.ran+len(run) == cfg.MaxToolCalls:
			c.IsError, c.Output = true, fmt.Sprintf("not run: the query has made its %d tool calls (api.max-tool-calls)", cfg.MaxToolCalls)
			r.refused(ctx, []*toolmeshv1.ToolCallRecord{c}, audit.OriginModel, "api.max-tool-calls")
		default:
			undo, l := r.h.policy.Take(r.caller, c.GetTool())
			if l != nil {
				r.h.policy.RecordLimited(ctx, l)
				c.IsError, c.Output = true, "not run: "+l.Error()
				r.refused(ctx, []*toolmeshv1.ToolCallRecord{c}, audit.OriginModel, string(policy.RuleRateLimit))
				continue
			}
			undos = append(undos, undo)
			run = append(run, c)
		}
	}
	return run, func() {
		for _, u := range undos {
			u()
		}
	}
}

// direct runs the calls a query of the form @SERVER.TOOL({...}) names, without a model.
func (r *runner) direct(ctx context.Context) (*toolmeshv1.QueryResponse, error) {
	parsed, err := parseDirect(r.q.text)
	if err != nil {
		return nil, errreason.InvalidField("query", "direct call: "+err.Error())
	}
	if limit := r.h.cfg.MaxToolCalls; len(parsed) > limit {
		return nil, errreason.InvalidField("query", fmt.Sprintf("direct call: %d calls, but a query makes at most %d (api.max-tool-calls)", len(parsed), limit))
	}
	calls := make([]*toolmeshv1.ToolCallRecord, len(parsed))
	for i, c := range parsed {
		args, err := structpb.NewStruct(c.Arguments)
		if err != nil {
			return nil, errreason.InvalidField("query", fmt.Sprintf("arguments of %s: %v", c.ToolID, err))
		}
		calls[i] = &toolmeshv1.ToolCallRecord{Tool: c.ToolID, Arguments: args}
	}
	// All or nothing: an app that names its calls gets them all run, or a refusal saying why.
	ids := make([]string, len(calls))
	for i, c := range calls {
		if d := r.h.policy.Call(r.caller, c.GetTool()); d != nil {
			r.refused(ctx, []*toolmeshv1.ToolCallRecord{c}, audit.OriginQuery, string(d.Rule))
			return nil, r.h.policy.Record(ctx, d)
		}
		ids[i] = c.GetTool()
	}
	undo, l := r.h.policy.Take(r.caller, ids...)
	if l != nil {
		_ = grpc.SetHeader(ctx, l.Header())
		for _, c := range calls {
			if c.GetTool() == l.Tool {
				r.refused(ctx, []*toolmeshv1.ToolCallRecord{c}, audit.OriginQuery, string(policy.RuleRateLimit))
				break
			}
		}
		return nil, r.h.policy.RecordLimited(ctx, l)
	}
	if err := r.h.guard.Charge(ctx, len(calls)); err != nil {
		undo()
		r.refused(ctx, calls, audit.OriginQuery, "api.rate-limit")
		return nil, err
	}
	r.resp.Steps = []*toolmeshv1.Step{{Number: 1}}
	r.resp.Iterations = 1
	r.execute(ctx, 1, calls, calls, false)
	if ctx.Err() != nil {
		return r.fail(ctx, ctx.Err(), 1, "calling tools")
	}
	if r.down != nil {
		return r.fail(ctx, r.down, 1, "calling tools")
	}
	// A call the executor refused or could not complete is the status POST .../TOOL:call
	// answers with (404 unknown tool, 400 invalid arguments, 504...), naming the call when
	// there are several; a tool that ran and reported an error is a result, below.
	for i, c := range calls {
		if err := r.failed[c]; err != nil {
			if len(calls) == 1 {
				return nil, err
			}
			st := status.Convert(err)
			return nil, status.Errorf(st.Code(), "call %d of %d (%s): %s", i+1, len(calls), c.GetTool(), st.Message())
		}
	}
	var b strings.Builder
	for i, c := range calls {
		if i > 0 {
			b.WriteString("\n")
		}
		if len(calls) > 1 {
			b.WriteString(c.GetTool() + ": ")
		}
		b.WriteString(c.GetOutput())
	}
	r.resp.Answer = b.String()
	r.resp.StopReason = toolmeshv1.StopReason_STOP_REASON_ANSWERED
	r.resp.FinishReason = "stop"
	for _, c := range calls {
		if c.GetIsError() {
			r.resp.StopReason = toolmeshv1.StopReason_STOP_REASON_TOOL_ERROR
		}
	}
	r.send(&toolmeshv1.QueryStreamResponse{Event: &toolmeshv1.QueryStreamResponse_AnswerDelta{AnswerDelta: r.resp.Answer}})
	return r.resp, nil
}

// execute records the calls of one step and runs those in run, at most cfg.MaxParallelCalls
// at a time; a failed call is a result with is_error set, for the model to see, and so is one
// admit refused. byModel says the model chose them (not a direct @SERVER.TOOL query), which
// the executor is told so that it applies allowDestructive too.
func (r *runner) execute(ctx context.Context, step int, calls, run []*toolmeshv1.ToolCallRecord, byModel bool) {
	first := len(r.resp.ToolCalls)
	for i, c := range calls {
		c.Step, c.Index = int32(step), int32(first+i)
	}
	r.resp.ToolCalls = append(r.resp.ToolCalls, calls...)
	for _, c := range calls {
		if !slices.Contains(run, c) {
			r.send(&toolmeshv1.QueryStreamResponse{Event: &toolmeshv1.QueryStreamResponse_ToolCallFinished{ToolCallFinished: c}})
		}
	}
	r.ran += len(run)
	r.lastRun = run
	sem := make(chan struct{}, r.h.cfg.MaxParallelCalls)
	var wg sync.WaitGroup
	for _, c := range run {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
				defer func() { <-sem }()
			case <-ctx.Done():
				c.IsError, c.Output = true, "not run: "+context.Cause(ctx).Error()
				return
			}
			c.StartMs = millis(time.Since(r.began))
			r.send(&toolmeshv1.QueryStreamResponse{Event: &toolmeshv1.QueryStreamResponse_ToolCallStarted{ToolCallStarted: c}})
			r.call(ctx, c, byModel)
			r.send(&toolmeshv1.QueryStreamResponse{Event: &toolmeshv1.QueryStreamResponse_ToolCallFinished{ToolCallFinished: c}})
		})
	}
	wg.Wait()
}

func (r *runner) call(ctx context.Context, c *toolmeshv1.ToolCallRecord, byModel bool) {
	ctx, span := r.h.tracer.Start(ctx, "execute_tool "+c.GetTool(), trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "execute_tool"), attribute.String("gen_ai.tool.name", c.GetTool()),
		attribute.String("gen_ai.tool.call.id", strconv.Itoa(int(c.GetIndex()))), attribute.Int("toolmesh.step.number", int(c.GetStep()))))
	// A metric names the tool only once the executor has shown it knows it: a caller or a
	// model can name any tool, and each name would otherwise be a series for good.
	label := unknownToolLabel
	defer func() {
		outcome := "ok"
		if c.GetIsError() {
			outcome = "error"
			// The error text is part of the result: recorded only where results may be.
			msg := "the tool returned an error"
			if r.h.payloads.Record {
				msg = r.h.payloads.Cut(c.GetOutput())
			}
			span.SetStatus(otelcodes.Error, msg)
			span.SetAttributes(attribute.String("error.type", "tool_error"))
		}
		if r.h.payloads.Record {
			args, _ := c.GetArguments().MarshalJSON()
			span.SetAttributes(attribute.String("gen_ai.tool.call.arguments", r.h.payloads.Cut(string(args))),
				attribute.String("gen_ai.tool.call.result", r.h.payloads.Cut(c.GetOutput())))
		}
		span.End()
		r.h.calls.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(attribute.String("gen_ai.tool.name", label), attribute.String("outcome", outcome)))
	}()
	ctx, cancel := context.WithTimeout(ctx, r.h.cfg.CallTimeout)
	defer cancel()
	start := time.Now()
	origin := audit.OriginQuery
	if byModel {
		origin = audit.OriginModel
	}
	audited := r.h.trail.begin(ctx, r.seen, origin, c.GetTool(), c.GetArguments())
	var res *toolmeshv1.ExecutorServiceCallToolResponse
	var trailer metadata.MD
	err := audited.ready()
	if err == nil {
		res, err = r.h.executor.CallTool(ctx, &toolmeshv1.ExecutorServiceCallToolRequest{ToolId: c.GetTool(), Arguments: c.GetArguments(), ByModel: byModel},
			grpc.Trailer(&trailer))
		if knownTool(ctx, err) {
			label = c.GetTool()
		}
	}
	audited.end(ctx, res, res.GetIsError(), err)
	if err != nil {
		err = dependencyError(ctx, "executor", r.h.cfg.ExecutorAddr, err)
		if unreachable(err) && ctx.Err() == nil {
			r.mu.Lock()
			r.down = err
			r.mu.Unlock()
		}
		c.IsError, c.Output = true, status.Convert(err).Message()
		c.DurationMs = float64(time.Since(start).Microseconds()) / 1000
		r.mu.Lock()
		if r.failed == nil {
			r.failed = map[*toolmeshv1.ToolCallRecord]error{}
		}
		r.failed[c] = err
		r.mu.Unlock()
		return
	}
	content := res.GetContent()
	marker := ""
	if len(trailer.Get(resultCutKey)) > 0 && len(content) > 0 {
		// The executor cut the result and said so in its last block: the record keeps that
		// note whatever api.max-output-bytes leaves of the rest.
		marker, content = content[len(content)-1].GetText(), content[:len(content)-1]
	}
	c.Output = renderOutput(content, res.GetStructuredContent(), max(r.h.cfg.MaxOutputBytes-len(marker), r.h.cfg.MaxOutputBytes/2))
	if marker != "" {
		c.Output += "\n" + marker
	}
	c.IsError = res.GetIsError()
	c.DurationMs = res.GetDurationMs()
}

// refused records calls that were not made, refused by rule (a policy rule or a limit).
func (r *runner) refused(ctx context.Context, calls []*toolmeshv1.ToolCallRecord, origin, rule string) {
	for _, c := range calls {
		r.h.trail.refused(ctx, r.seen, origin, c.GetTool(), c.GetArguments(), rule)
	}
}

// unknownToolLabel stands for every tool the executor does not know in metric labels.
const unknownToolLabel = "unknown"

// knownTool says whether the executor's answer to a call shows the tool is in its catalog:
// it answered, and not with UNKNOWN_TOOL or a policy denial (the executor decides those by the
// name alone, before it looks the tool up). An unreachable executor or our own deadline says
// nothing either way.
func knownTool(ctx context.Context, err error) bool {
	switch {
	case err == nil:
		return true
	case ctx.Err() != nil, unreachable(err), status.Code(err) == codes.Canceled:
		return false
	}
	switch errreason.Of(err) {
	case errreason.UnknownTool, errreason.PolicyDenied:
		return false
	}
	return true
}

// compose asks the model for the final answer from the calls' results and streams it. When
// composing fails, the model's own text or the last results stand in, so the work is not lost.
func (r *runner) compose(ctx context.Context, modelAnswer string) (*toolmeshv1.QueryResponse, error) {
	r.resp.FinishReason = "stop"
	t := time.Now()
	answer, err := r.composeStream(ctx)
	r.resp.ComposeStartMs, r.resp.ComposeMs = r.timed(t)
	if err == nil {
		r.resp.Answer = answer
		return r.resp, nil
	}
	if ctx.Err() != nil {
		r.resp.Answer = answer
		return r.fail(ctx, ctx.Err(), int(r.resp.GetIterations()), "composing the answer")
	}
	if answer != "" {
		// The answer broke off part way: what came is kept, and the query says it failed
		// rather than passing a cut sentence off as the answer.
		r.resp.Answer = answer
		r.resp.StopReason = toolmeshv1.StopReason_STOP_REASON_ERROR
		r.resp.Error = "composing the answer failed part way: " + status.Convert(err).Message()
		return r.resp, nil
	}
	r.h.logger.WarnContext(ctx, "composing the answer failed; answering with the results", "err", err)
	if answer == "" {
		answer = modelAnswer
	}
	if answer == "" {
		answer = r.resultsText()
	}
	r.resp.Answer = answer
	r.send(&toolmeshv1.QueryStreamResponse{Event: &toolmeshv1.QueryStreamResponse_AnswerDelta{AnswerDelta: answer}})
	return r.resp, nil
}

func (r *runner) composeStream(ctx context.Context) (string, error) {
	stream, err := r.h.inference.ComposeAnswer(ctx, &toolmeshv1.ComposeAnswerRequest{Query: r.q.text, History: r.history(),
		Messages: r.q.conv.earlier, Generation: r.q.generation})
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return b.String(), nil
		}
		if err != nil {
			return b.String(), err
		}
		if m.GetDone() {
			r.addUsage(m.GetUsage())
			r.resp.FinishReason = finishReason(m.GetFinishReason())
		}
		if d := m.GetDelta(); d != "" {
			b.WriteString(d)
			r.send(&toolmeshv1.QueryStreamResponse{Event: &toolmeshv1.QueryStreamResponse_AnswerDelta{AnswerDelta: d}})
		}
	}
}

// resultsText is the answer of last resort: what the last step's calls returned.
func (r *runner) resultsText() string {
	calls := r.history()
	if len(calls) == 0 {
		return ""
	}
	last := calls[len(calls)-1].GetStep()
	var lines []string
	for _, c := range calls {
		if c.GetStep() == last {
			lines = append(lines, c.GetTool()+" returned: "+c.GetOutput())
		}
	}
	return strings.Join(lines, "\n")
}

// fail ends the loop on err. A client that went away gets Canceled. Otherwise, before any
// tool was called the error is returned as is (a missing backend is a 503, not a 200 with
// nothing in it); after that the work so far is returned with the stop reason, so nothing
// done is lost.
func (r *runner) fail(ctx context.Context, err error, step int, doing string) (*toolmeshv1.QueryResponse, error) {
	// A dependency can see the deadline (it travels with the call) and cancel a moment
	// before the timer here fires: a Canceled or DeadlineExceeded at the deadline is the deadline.
	if dl, ok := ctx.Deadline(); ctx.Err() == nil && ok && time.Until(dl) < 20*time.Millisecond {
		if c := status.Code(err); c == codes.Canceled || c == codes.DeadlineExceeded {
			<-ctx.Done()
		}
	}
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		if !errors.Is(cause, errQueryDeadline) {
			return nil, status.Errorf(codes.Canceled, "query canceled while %s: %v", doing, cause)
		}
		r.resp.StopReason = toolmeshv1.StopReason_STOP_REASON_DEADLINE
		r.resp.Error = fmt.Sprintf("the query's %s deadline passed in step %d while %s", r.q.timeout, step, doing)
		return r.resp, nil
	}
	if !r.anyCallWorked() {
		return nil, err
	}
	r.resp.StopReason = toolmeshv1.StopReason_STOP_REASON_ERROR
	r.resp.Error = fmt.Sprintf("step %d, %s: %s", step, doing, status.Convert(err).Message())
	return r.resp, nil
}

// anyCallWorked says whether a tool call has returned a result, i.e. there is work to return.
func (r *runner) anyCallWorked() bool {
	for _, c := range r.resp.GetToolCalls() {
		if !c.GetIsError() {
			return true
		}
	}
	return false
}

// inferenceError explains an unreachable model: which backend URL was tried (the inference
// service knows it) and what to do about it.
func (r *runner) inferenceError(ctx context.Context, err error) error {
	err = dependencyError(ctx, "inference", r.h.cfg.InferenceAddr, err)
	st := status.Convert(err)
	if st.Code() != codes.Unavailable {
		return err
	}
	tried, fix := "", startHint
	sctx, cancel := context.WithTimeout(ctx, r.h.cfg.RPCTimeout)
	defer cancel()
	if ms, err := r.h.inference.GetModelStatus(sctx, &toolmeshv1.GetModelStatusRequest{}); err == nil {
		if ms.GetBackendUrl() != "" {
			tried = " at " + ms.GetBackendUrl()
		}
		if ms.GetFix() != "" {
			// The inference service knows what is missing (the model, llama-server itself).
			fix = "to fix: " + ms.GetFix() + "; tool search and direct calls like @calculator.add({\"a\":2,\"b\":3}) work meanwhile"
		}
	}
	switch errreason.Of(err) {
	case errreason.NotReady:
		return status.Errorf(codes.Unavailable, "the model%s is still loading (%s); retry in a few seconds", tried, st.Message())
	case errreason.BackendUnreadable:
		// It answers, so "start one" would mislead: something else may be listening there.
		return status.Errorf(codes.Unavailable, "the model backend%s answered something that is not a model server's answer (%s); check that --llm-url points at llama-server or an OpenAI-compatible server and not at a proxy's error page or another service", tried, st.Message())
	}
	return status.Errorf(codes.Unavailable, "no model to answer with: the model backend%s does not answer (%s); %s", tried, st.Message(), fix)
}

// retrievalQuery is the question, and from the second step on the question plus the argument
// values of the calls the last step ran. It never holds what a tool returned: a tool's
// output is data, and text in it ("SYSTEM: now call query_database ...") must not choose the
// tools the model is offered next. Nor does it hold a call that was refused: the model may
// have named a tool it was not offered because a tool's output told it to. In a conversation
// the first step adds the user's message before the question, so that "and for Paris?" finds
// the tools "What is the weather in London?" found; it adds no assistant text, which may
// repeat what a tool said.
func (r *runner) retrievalQuery() string {
	b := []byte(r.q.text)
	if len(r.lastRun) == 0 {
		prev := previousQuestion(r.q.conv.earlier)
		if prev == "" {
			return r.q.text
		}
		b = append(b, ' ')
		b = append(b, truncateUTF8(prev, retrievalQueryBytes/2)...)
		return truncateUTF8(string(b), max(retrievalQueryBytes, len(r.q.text)))
	}
	limit := max(retrievalQueryBytes, len(r.q.text))
	for _, c := range r.lastRun {
		b = appendValues(b, structpb.NewStructValue(c.GetArguments()), limit)
	}
	return truncateUTF8(string(b), limit)
}

// appendValues appends the strings, numbers and booleans in v, each after a space, objects in
// key order. Keys and tool ids are left out: a parameter name ("a", "path") or a server name
// matches every tool that shares it, and searching for them offered the model the whole
// server from step 2 on (on BFCL's multi-function queries R@4 0.739 with ids and arguments as
// JSON, 0.809 with the values alone, 0.814 with the question alone: bench/retrieval -followup).
// It stops once b holds limit bytes.
func appendValues(b []byte, v *structpb.Value, limit int) []byte {
	if len(b) >= limit {
		return b
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		b = append(append(b, ' '), k.StringValue...)
	case *structpb.Value_NumberValue:
		b = strconv.AppendFloat(append(b, ' '), k.NumberValue, 'g', -1, 64)
	case *structpb.Value_BoolValue:
		b = strconv.AppendBool(append(b, ' '), k.BoolValue)
	case *structpb.Value_ListValue:
		for _, e := range k.ListValue.GetValues() {
			b = appendValues(b, e, limit)
		}
	case *structpb.Value_StructValue:
		for _, key := range slices.Sorted(maps.Keys(k.StructValue.GetFields())) {
			b = appendValues(b, k.StructValue.GetFields()[key], limit)
		}
	}
	return b
}

// previousQuestion is the last user message of the earlier turns ("" when there is none).
func previousQuestion(earlier []*toolmeshv1.Message) string {
	for i := len(earlier) - 1; i >= 0; i-- {
		if earlier[i].GetRole() == chatcheck.RoleUser {
			return earlier[i].GetContent()
		}
	}
	return ""
}

// renderOutput turns a tool result into the text the model and the user read.
func renderOutput(content []*toolmeshv1.Content, structured *structpb.Struct, limit int) string {
	var parts []string
	for _, c := range content {
		switch {
		case c.Text != nil:
			parts = append(parts, c.GetText())
		case c.GetType() == "resource_link":
			parts = append(parts, fmt.Sprintf("[resource link %s %s]", c.GetName(), c.GetUri()))
		default:
			parts = append(parts, fmt.Sprintf("[%s %s, %d bytes]", c.GetType(), c.GetMimeType(), len(c.GetData())))
		}
	}
	out := strings.Join(parts, "\n")
	if out == "" && structured != nil {
		if data, err := structured.MarshalJSON(); err == nil {
			out = string(data)
		}
	}
	if len(out) > limit {
		cut := truncateUTF8(out, limit)
		out = fmt.Sprintf("%s… [cut: %d more bytes]", cut, len(out)-len(cut))
	}
	return out
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
