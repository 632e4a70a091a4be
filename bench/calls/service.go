package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/services/inference"
	"github.com/toolmesh/toolmesh/services/inference/gorilla"
	"github.com/toolmesh/toolmesh/services/retriever/index"
	"github.com/toolmesh/toolmesh/services/retriever/lexical"
	"github.com/toolmesh/toolmesh/services/retriever/store/memory"
)

// serviceDecoder sends each case through the inference service run in this process, as the
// api sends a question's first step: Generate with the candidate tools best first and no
// max_tokens, so the service's own prompt budget decides n_predict and which tools to drop.
type serviceDecoder struct {
	svc      *inference.Service
	nPredict int          // the service's n_predict ceiling
	client   *llamaClient // counts the whole tool list's prompt, for the record
}

// newServiceDecoder configures the service as `serve --target=inference` is by default, with
// its llama-server at url, nPredict as its n_predict ceiling (0: the default) and timeout per
// request.
func newServiceDecoder(client *llamaClient, url string, nPredict int, timeout time.Duration) (*serviceDecoder, error) {
	var cfg inference.Config
	fs := flag.NewFlagSet("inference", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.RegisterFlags(fs)
	args := []string{"-inference.llm.url=" + url, "-inference.llm.timeout=" + timeout.String()}
	if nPredict > 0 {
		args = append(args, fmt.Sprintf("-inference.llm.n-predict=%d", nPredict))
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	svc, err := inference.New(cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		return nil, fmt.Errorf("inference service: %w", err)
	}
	return &serviceDecoder{svc: svc, nPredict: cfg.LLM.NPredict, client: client}, nil
}

func (d *serviceDecoder) close() { d.svc.Close() }

// decode ranks the case's tools and asks the service for the first step.
func (d *serviceDecoder) decode(ctx context.Context, c bfclCase, tools []*toolmeshv1.Tool) outcome {
	ranked, err := rank(ctx, c.Query, tools)
	if err != nil {
		return outcome{err: err}
	}
	// What the whole tool list's prompt takes, as the service builds it before any budget:
	// where it exceeds the context, llama-server would refuse it (400
	// exceed_context_size_error) had nothing been dropped.
	whole, err := gorilla.Build(tools)
	if err != nil {
		return outcome{err: fmt.Errorf("build: %w", err)}
	}
	n, err := d.client.countTokens(ctx, whole.Prompt(c.Query, nil))
	if err != nil {
		return outcome{err: err}
	}
	resp, err := d.svc.Generate(ctx, &toolmeshv1.GenerateRequest{Query: c.Query, Tools: ranked})
	if err != nil {
		// The service's own statuses (handler.go): ResourceExhausted when the prompt does not
		// fit even without tools, or when the output was cut before its calls were complete;
		// Internal when an output bound by the grammar does not parse.
		st := status.Convert(err)
		cut := st.Code() == codes.ResourceExhausted && strings.Contains(st.Message(), "cut off")
		switch {
		case cut, st.Code() == codes.Internal && strings.Contains(st.Message(), "does not parse"):
			return outcome{parseErr: err, cut: cut, wholeTokens: n}
		case st.Code() == codes.ResourceExhausted:
			return outcome{refused: true, err: err, wholeTokens: n}
		}
		return outcome{err: err, wholeTokens: n}
	}
	o := outcome{raw: resp.GetRawOutput(), budgeted: true, dropped: resp.GetDroppedToolIds(), wholeTokens: n}
	for _, fc := range resp.GetCalls() {
		o.calls = append(o.calls, gorilla.Call{ToolID: fc.GetToolId(), Arguments: fc.GetArguments().AsMap()})
	}
	return o
}

// rank orders a case's tools best first for its query, as the retriever hands them to the
// api: the embedded index (lexical.Default) over the case's tools; tools the query shares no
// term with follow in the case's order. Which tools the service drops depends on this order.
func rank(ctx context.Context, query string, tools []*toolmeshv1.Tool) ([]*toolmeshv1.ScoredTool, error) {
	ix := index.New(memory.New(), lexical.Default(), nil)
	if err := ix.Upsert(ctx, tools); err != nil {
		return nil, fmt.Errorf("rank: %w", err)
	}
	hits, err := ix.Search(ctx, query, len(tools), nil)
	if err != nil && !errors.Is(err, index.ErrEmptyQuery) {
		return nil, fmt.Errorf("rank: %w", err)
	}
	out := make([]*toolmeshv1.ScoredTool, 0, len(tools))
	seen := map[string]bool{}
	for _, h := range hits {
		out = append(out, h)
		seen[h.GetTool().GetId()] = true
	}
	for _, t := range tools {
		if !seen[t.GetId()] {
			out = append(out, &toolmeshv1.ScoredTool{Tool: t})
		}
	}
	return out, nil
}
