package openaiface

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

const (
	chatPath   = "/v1/chat/completions"
	modelsPath = "/v1/models"
	// keepAlive is how often a stream that has nothing to say sends an SSE comment, so that a
	// proxy between the app and the mesh does not close it while a tool runs.
	keepAlive = 15 * time.Second
)

// Routes are the ServeMux patterns the face serves (every method: it answers a wrong one with
// 405 in OpenAI's shape).
var Routes = []string{chatPath, modelsPath, modelsPath + "/"}

// agentClient is the part of the api's AgentService the face calls.
type agentClient interface {
	Query(ctx context.Context, in *toolmeshv1.QueryRequest, opts ...grpc.CallOption) (*toolmeshv1.QueryResponse, error)
	QueryStream(ctx context.Context, in *toolmeshv1.QueryStreamRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[toolmeshv1.QueryStreamResponse], error)
	ListModels(ctx context.Context, in *toolmeshv1.ListModelsRequest, opts ...grpc.CallOption) (*toolmeshv1.ListModelsResponse, error)
}

// Face serves the OpenAI routes.
type Face struct {
	agent agentClient
	// forward is the metadata a request's calls to the agent carry: its token, and the mark
	// that the REST side has checked the client (auth.Guard.ForwardedMetadata).
	forward   func(*http.Request) metadata.MD
	logger    *slog.Logger
	started   int64
	keepAlive time.Duration
}

// New returns the face of agent, a client of the api's own gRPC server (so that a completion
// passes the same token check, rate limit and tracing as POST /v1/query).
func New(agent agentClient, forward func(*http.Request) metadata.MD, logger *slog.Logger) *Face {
	return &Face{agent: agent, forward: forward, logger: logger, started: time.Now().Unix(), keepAlive: keepAlive}
}

func (f *Face) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == chatPath && r.Method == http.MethodPost:
		f.chat(w, r)
	case p == chatPath:
		methodNotAllowed(w, r, http.MethodPost)
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		methodNotAllowed(w, r, http.MethodGet)
	case p == modelsPath:
		f.models(w, r, "")
	default:
		name := strings.TrimPrefix(p, modelsPath+"/")
		if name == "" {
			f.models(w, r, "")
			return
		}
		f.models(w, r, name)
	}
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	writeError(w, http.StatusMethodNotAllowed, newAPIError(http.StatusMethodNotAllowed,
		fmt.Sprintf("%s is not a method of %s (%s is)", r.Method, r.URL.Path, allow), "", ""), traceExtension(r.Context()))
}

// outgoing is the context of the request's calls to the agent.
func (f *Face) outgoing(r *http.Request) context.Context {
	return metadata.NewOutgoingContext(r.Context(), f.forward(r))
}

// chat answers POST /v1/chat/completions.
func (f *Face) chat(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, newAPIError(http.StatusBadRequest, "body: "+err.Error(), "", ""), traceExtension(r.Context()))
		return
	}
	req, perr := parseChat(body)
	if perr != nil {
		writeError(w, http.StatusBadRequest, newAPIError(http.StatusBadRequest, perr.msg, perr.param, perr.code), traceExtension(r.Context()))
		return
	}
	id, created := newID(), time.Now().Unix()
	span := trace.SpanFromContext(r.Context())
	if span.IsRecording() {
		span.SetAttributes(requestAttributes(id, req)...)
	}
	if req.stream {
		f.stream(w, r, req, id, created)
		return
	}
	var header metadata.MD
	resp, err := f.agent.Query(f.outgoing(r), req.query, grpc.Header(&header))
	if err != nil {
		code, e := fromStatus(w, err, header)
		writeError(w, code, e, traceExtension(r.Context()))
		return
	}
	if code, e, failed := failedWithout(resp); failed {
		writeError(w, code, e, summary(resp))
		return
	}
	c := completionOf(id, created, req.query.GetModel(), resp)
	if span.IsRecording() {
		span.SetAttributes(responseAttributes(c.Model, c.Choices[0].FinishReason, c.Usage)...)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(c)
}

// failedWithout reports a query that ended in a timeout or an error with no answer at all: an
// OpenAI client would take an empty answer for the model's, so it gets the error instead, with
// what was done in the extension.
func failedWithout(resp *toolmeshv1.QueryResponse) (int, apiError, bool) {
	if resp.GetAnswer() != "" || len(resp.GetFunctionCalls()) > 0 {
		return 0, apiError{}, false
	}
	switch resp.GetStopReason() {
	case toolmeshv1.StopReason_STOP_REASON_DEADLINE:
		return http.StatusGatewayTimeout, newAPIError(http.StatusGatewayTimeout, resp.GetError(), "", ""), true
	case toolmeshv1.StopReason_STOP_REASON_ERROR:
		return http.StatusBadGateway, newAPIError(http.StatusBadGateway, resp.GetError(), "", ""), true
	}
	return 0, apiError{}, false
}

// event is one answer of the agent's stream.
type event struct {
	ev  *toolmeshv1.QueryStreamResponse
	err error
}

// stream answers a chat completion with stream: true, as server-sent events. Nothing is written
// until the loop has got past what can fail as a whole (the check of the request, the policy,
// the first retrieval, the model): until then an error is an ordinary error answer with its
// status. After it, an error is a last event {"error": {...}}, which the SDKs raise.
func (f *Face) stream(w http.ResponseWriter, r *http.Request, req *chatRequest, id string, created int64) {
	ctx, cancel := context.WithCancel(f.outgoing(r))
	defer cancel()
	q := req.query
	st, err := f.agent.QueryStream(ctx, &toolmeshv1.QueryStreamRequest{Query: q.GetQuery(), K: q.GetK(), MaxIterations: q.GetMaxIterations(),
		Servers: q.GetServers(), TimeoutSeconds: q.GetTimeoutSeconds(), Messages: q.GetMessages(), Functions: q.GetFunctions(),
		ToolChoice: q.GetToolChoice(), Generation: q.GetGeneration(), Model: q.GetModel()})
	if err != nil {
		code, e := fromStatus(w, err, nil)
		writeError(w, code, e, traceExtension(r.Context()))
		return
	}
	events := make(chan event)
	go func() {
		for {
			ev, err := st.Recv()
			select {
			case events <- event{ev, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	s := &sse{w: w, rc: http.NewResponseController(w), id: id, created: created, model: q.GetModel(), usage: req.includeUsage}
	var pending []*toolmeshv1.QueryStreamResponse
	tick := time.NewTicker(f.keepAlive)
	defer tick.Stop()
	for {
		var e event
		select {
		case e = <-events:
		case <-tick.C:
			if s.started {
				s.comment("keep-alive")
			}
			continue
		case <-r.Context().Done():
			return
		}
		if e.err != nil {
			err := e.err
			if errors.Is(err, io.EOF) {
				err = status.Error(codes.Internal, "the query's stream ended without its result")
			}
			header, _ := st.Header()
			if !s.started {
				code, ae := fromStatus(w, err, header)
				writeError(w, code, ae, traceExtension(r.Context()))
				return
			}
			_, ae := fromStatus(w, err, header)
			s.error(ae, nil)
			return
		}
		if !s.started {
			if _, ok := e.ev.GetEvent().(*toolmeshv1.QueryStreamResponse_Retrieved); ok {
				pending = append(pending, e.ev)
				continue
			}
			s.start()
			for _, p := range pending {
				s.event(p)
			}
		}
		if done := s.event(e.ev); done != nil {
			if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
				span.SetAttributes(responseAttributes(modelOf(q.GetModel(), done), finishOf(done), usageOf(done))...)
			}
			return
		}
	}
}

// models answers GET /v1/models and GET /v1/models/{model}.
func (f *Face) models(w http.ResponseWriter, r *http.Request, name string) {
	var header metadata.MD
	resp, err := f.agent.ListModels(f.outgoing(r), &toolmeshv1.ListModelsRequest{}, grpc.Header(&header))
	if err != nil {
		code, e := fromStatus(w, err, header)
		if code == http.StatusNotFound {
			code, e = http.StatusInternalServerError, newAPIError(http.StatusInternalServerError, e.Message, "", "")
		}
		writeError(w, code, e, traceExtension(r.Context()))
		return
	}
	list := modelList{Object: "list", Data: []modelObject{}}
	for _, m := range resp.GetModels() {
		list.Data = append(list.Data, modelObject{ID: m.GetId(), Object: "model", Created: f.started, OwnedBy: "toolmesh"})
	}
	w.Header().Set("Content-Type", "application/json")
	if name == "" {
		_ = json.NewEncoder(w).Encode(list)
		return
	}
	for _, m := range list.Data {
		if m.ID == name {
			_ = json.NewEncoder(w).Encode(m)
			return
		}
	}
	writeError(w, http.StatusNotFound, newAPIError(http.StatusNotFound,
		fmt.Sprintf("The model %q does not exist: GET /v1/models lists the models of this mesh", cut(name, 64)), "model", "model_not_found"),
		traceExtension(r.Context()))
}

// traceExtension names the request's trace in an error answer.
func traceExtension(ctx context.Context) *extension {
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		return &extension{TraceID: sc.TraceID().String()}
	}
	return nil
}

// requestAttributes are the GenAI semantic-convention attributes of a completion request,
// for the REST request's span.
func requestAttributes(id string, req *chatRequest) []attribute.KeyValue {
	q := req.query
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.provider.name", "toolmesh"),
		attribute.String("gen_ai.request.model", q.GetModel()), attribute.String("gen_ai.response.id", id),
		attribute.Bool("gen_ai.request.stream", req.stream), attribute.Int("toolmesh.chat.messages", len(q.GetMessages())),
		attribute.Int("toolmesh.chat.functions", len(q.GetFunctions())),
	}
	if g := q.GetGeneration(); g != nil {
		if g.GetMaxTokens() > 0 {
			attrs = append(attrs, attribute.Int("gen_ai.request.max_tokens", int(g.GetMaxTokens())))
		}
		if g.Temperature != nil {
			attrs = append(attrs, attribute.Float64("gen_ai.request.temperature", g.GetTemperature()))
		}
		if g.TopP != nil {
			attrs = append(attrs, attribute.Float64("gen_ai.request.top_p", g.GetTopP()))
		}
		if g.Seed != nil {
			attrs = append(attrs, attribute.Int64("gen_ai.request.seed", g.GetSeed()))
		}
		if len(g.GetStop()) > 0 {
			attrs = append(attrs, attribute.StringSlice("gen_ai.request.stop_sequences", g.GetStop()))
		}
	}
	if req.user != "" {
		// The app's id for its end user: an opaque name, which is what the field is for.
		attrs = append(attrs, attribute.String("user.id", cut(req.user, 128)))
	}
	return attrs
}

func responseAttributes(model, finish string, u *usage) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("gen_ai.response.model", model), attribute.StringSlice("gen_ai.response.finish_reasons", []string{finish}),
		attribute.Int("gen_ai.usage.input_tokens", u.PromptTokens), attribute.Int("gen_ai.usage.output_tokens", u.CompletionTokens),
	}
}
