package inference

import (
	"context"
	"net"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/services/inference/chat"
	"github.com/toolmesh/toolmesh/services/inference/llama"
)

// genAI holds what every model call records: a CLIENT span `chat {model}` with the
// OpenTelemetry GenAI attributes, and the token and duration histograms.
type genAI struct {
	tracer   trace.Tracer
	provider string
	model    string
	server   []attribute.KeyValue
	tokens   metric.Int64Histogram
	duration metric.Float64Histogram
}

func newGenAI(tel *telemetry.Service, provider, model, baseURL string) *genAI {
	g := &genAI{tracer: tel.Tracer("github.com/toolmesh/toolmesh/services/inference"), provider: provider, model: model}
	if u, err := url.Parse(baseURL); err == nil {
		host, port, err := net.SplitHostPort(u.Host)
		if err != nil {
			host = u.Host
		}
		g.server = append(g.server, attribute.String("server.address", host))
		if p, err := strconv.Atoi(port); err == nil {
			g.server = append(g.server, attribute.Int("server.port", p))
		}
	}
	meter := tel.Meter("github.com/toolmesh/toolmesh/services/inference")
	var err error
	if g.tokens, err = meter.Int64Histogram("gen_ai.client.token.usage", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens used per model call, by type (input, output)."),
		metric.WithExplicitBucketBoundaries(1, 4, 16, 64, 256, 1024, 4096, 16384, 65536)); err != nil {
		g.tokens, _ = metricnoop.Meter{}.Int64Histogram("")
	}
	if g.duration, err = meter.Float64Histogram("gen_ai.client.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("Time of one model call."),
		metric.WithExplicitBucketBoundaries(0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)); err != nil {
		g.duration, _ = metricnoop.Meter{}.Float64Histogram("")
	}
	return g
}

// call is one model call in progress.
type call struct {
	g     *genAI
	span  trace.Span
	start time.Time
	attrs []attribute.KeyValue
}

// start opens the span of one call; request attributes are only built when it records.
func (g *genAI) start(ctx context.Context, stream bool, request func() []attribute.KeyValue) (context.Context, *call) {
	ctx, span := g.tracer.Start(ctx, "chat "+g.model, trace.WithSpanKind(trace.SpanKindClient))
	c := &call{g: g, span: span, start: time.Now(), attrs: []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.provider.name", g.provider),
		attribute.String("gen_ai.request.model", g.model),
	}}
	if span.IsRecording() {
		span.SetAttributes(c.attrs...)
		span.SetAttributes(g.server...)
		span.SetAttributes(attribute.Bool("gen_ai.request.stream", stream))
		if request != nil {
			span.SetAttributes(request()...)
		}
	}
	return ctx, c
}

// end records the outcome: usage, why generation stopped, the error if any.
func (c *call) end(ctx context.Context, input, output int, finish string, err error, more ...attribute.KeyValue) {
	defer c.span.End()
	metricAttrs := c.attrs
	if err != nil {
		errType := status.Code(err).String()
		c.span.SetStatus(otelcodes.Error, err.Error())
		c.span.SetAttributes(attribute.String("error.type", errType))
		metricAttrs = append(metricAttrs[:len(metricAttrs):len(metricAttrs)], attribute.String("error.type", errType))
	} else if c.span.IsRecording() {
		c.span.SetAttributes(attribute.Int("gen_ai.usage.input_tokens", input), attribute.Int("gen_ai.usage.output_tokens", output))
		if finish != "" {
			c.span.SetAttributes(attribute.StringSlice("gen_ai.response.finish_reasons", []string{finish}))
		}
		c.span.SetAttributes(more...)
	}
	ctx = context.WithoutCancel(ctx)
	c.g.duration.Record(ctx, time.Since(c.start).Seconds(), metric.WithAttributes(metricAttrs...))
	if err == nil {
		c.g.tokens.Record(ctx, int64(input), metric.WithAttributes(append(c.attrs[:len(c.attrs):len(c.attrs)], attribute.String("gen_ai.token.type", "input"))...))
		c.g.tokens.Record(ctx, int64(output), metric.WithAttributes(append(c.attrs[:len(c.attrs):len(c.attrs)], attribute.String("gen_ai.token.type", "output"))...))
	}
}

// tracedLLM wraps a llama-server client so every completion is a `chat` span.
type tracedLLM struct {
	completer
	g *genAI
}

func completionRequest(req llama.CompletionRequest) func() []attribute.KeyValue {
	return func() []attribute.KeyValue {
		a := []attribute.KeyValue{attribute.Int("gen_ai.request.max_tokens", req.NPredict),
			attribute.Bool("toolmesh.llm.grammar", req.Grammar != ""), attribute.Int("toolmesh.llm.grammar_bytes", len(req.Grammar))}
		return append(a, samplingAttrs(req.Temperature, req.TopP, req.Seed, req.Stop)...)
	}
}

// samplingAttrs are the GenAI attributes of the sampling options that are set.
func samplingAttrs(temperature, topP *float64, seed *int64, stop []string) []attribute.KeyValue {
	var a []attribute.KeyValue
	if temperature != nil {
		a = append(a, attribute.Float64("gen_ai.request.temperature", *temperature))
	}
	if topP != nil {
		a = append(a, attribute.Float64("gen_ai.request.top_p", *topP))
	}
	if seed != nil {
		a = append(a, attribute.Int64("gen_ai.request.seed", *seed))
	}
	if len(stop) > 0 {
		a = append(a, attribute.StringSlice("gen_ai.request.stop_sequences", stop))
	}
	return a
}

// generationAttrs are the GenAI attributes of a request's generation options that are set.
func generationAttrs(gen *toolmeshv1.GenerationOptions) []attribute.KeyValue {
	if gen == nil {
		return nil
	}
	a := samplingAttrs(gen.Temperature, gen.TopP, gen.Seed, gen.GetStop())
	if gen.GetMaxTokens() > 0 {
		a = append(a, attribute.Int("gen_ai.request.max_tokens", int(gen.GetMaxTokens())))
	}
	return a
}

// recordOutcome puts on the RPC's span what the caller asked for and how the answer ended:
// the model call's own span says what llama-server was sent and why it stopped, which differs
// where the service bounds the answer itself (a Gorilla answer cut at a stop string or
// max_tokens after the grammar-bound call). The conversation's fit goes there too.
func recordOutcome(ctx context.Context, gen *toolmeshv1.GenerationOptions, finish string, fit *toolmeshv1.HistoryFit) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(generationAttrs(gen)...)
	span.SetAttributes(attribute.StringSlice("gen_ai.response.finish_reasons", []string{finish}),
		attribute.Int("toolmesh.history.turns", int(fit.GetTurns())), attribute.Int("toolmesh.history.summarized", int(fit.GetSummarized())),
		attribute.Int("toolmesh.history.dropped", int(fit.GetDropped())))
}

func (t tracedLLM) Complete(ctx context.Context, req llama.CompletionRequest) (*llama.Completion, error) {
	ctx, c := t.g.start(ctx, false, completionRequest(req))
	comp, err := t.completer.Complete(ctx, req)
	t.endCompletion(ctx, c, comp, err)
	return comp, err
}

func (t tracedLLM) CompleteStream(ctx context.Context, req llama.CompletionRequest, fn func(llama.Chunk) error) (*llama.Completion, error) {
	ctx, c := t.g.start(ctx, true, completionRequest(req))
	comp, err := t.completer.CompleteStream(ctx, req, fn)
	t.endCompletion(ctx, c, comp, err)
	return comp, err
}

func (t tracedLLM) endCompletion(ctx context.Context, c *call, comp *llama.Completion, err error) {
	if err != nil || comp == nil {
		c.end(ctx, 0, 0, "", llmStatus(err))
		return
	}
	c.end(ctx, comp.TokensEvaluated, comp.TokensPredicted, finishReason(comp), nil,
		attribute.String("toolmesh.llm.stop_type", comp.StopType),
		attribute.Int("toolmesh.llm.tokens_cached", comp.TokensCached),
		attribute.Float64("toolmesh.llm.prompt_ms", comp.Timings.PromptMS),
		attribute.Float64("toolmesh.llm.predicted_ms", comp.Timings.PredictedMS),
		attribute.Bool("toolmesh.llm.truncated", comp.Truncated))
}

// tracedChat wraps the OpenAI-compatible backend the same way.
type tracedChat struct {
	chatBackend
	g *genAI
}

func (t tracedChat) Generate(ctx context.Context, req chat.Request) (*chat.Result, error) {
	ctx, c := t.g.start(ctx, false, func() []attribute.KeyValue {
		return append(generationAttrs(req.Generation), attribute.Int("toolmesh.llm.max_tokens", req.MaxTokens),
			attribute.Int("toolmesh.llm.tools", len(req.Tools)), attribute.Int("toolmesh.llm.functions", len(req.Functions)),
			attribute.Int("toolmesh.llm.messages", len(req.Messages)), attribute.Bool("toolmesh.llm.require_call", req.RequireCall))
	})
	res, err := t.chatBackend.Generate(ctx, req)
	if err != nil {
		c.end(ctx, 0, 0, "", backendStatus(err))
		return res, err
	}
	c.end(ctx, res.PromptTokens, res.CompletionTokens, res.FinishReason, nil)
	return res, nil
}

func (t tracedChat) Compose(ctx context.Context, req chat.ComposeRequest, fn func(delta string) error) (*chat.ComposeResult, error) {
	ctx, c := t.g.start(ctx, true, func() []attribute.KeyValue {
		return append(generationAttrs(req.Generation), attribute.Int("toolmesh.llm.max_tokens", req.MaxTokens),
			attribute.Int("toolmesh.llm.messages", len(req.Messages)))
	})
	res, err := t.chatBackend.Compose(ctx, req, fn)
	if err != nil {
		c.end(ctx, 0, 0, "", backendStatus(err))
		return res, err
	}
	c.end(ctx, res.PromptTokens, res.CompletionTokens, res.FinishReason, nil)
	return res, nil
}
