package inference

import (
	"context"
	"flag"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/llamatest"
	"github.com/toolmesh/toolmesh/internal/telemetry"
)

// TestGenAIAttributes: the model call's span says what llama-server was sent and why it
// stopped; the RPC's span says what the caller asked for and how its answer ended, which
// differs where the service cut a Gorilla answer itself.
func TestGenAIAttributes(t *testing.T) {
	seed := int64(42)
	gen := &toolmeshv1.GenerationOptions{Temperature: new(0.7), TopP: new(0.9), Seed: &seed, Stop: []string{"six"}, MaxTokens: 5}
	for _, tc := range []struct {
		name      string
		call      func(ctx context.Context, s *Service) error
		model     map[string]string // attributes of the "chat" span, as fmt.Sprint shows their values
		rpc       map[string]string // of the RPC's span
		modelNone []string          // attributes the model span must not have
	}{
		{
			name: "generate: an answer cut at max_tokens",
			call: func(ctx context.Context, s *Service) error {
				_, err := s.Generate(ctx, &toolmeshv1.GenerateRequest{Query: "Count.", Tools: calcTools(t), Generation: gen, Messages: conversation(t)})
				return err
			},
			model: map[string]string{"gen_ai.request.temperature": "0.7", "gen_ai.request.top_p": "0.9", "gen_ai.request.seed": "42",
				"gen_ai.request.max_tokens": "64", "gen_ai.response.finish_reasons": "[stop]", "toolmesh.llm.stop_type": "eos"},
			modelNone: []string{"gen_ai.request.stop_sequences"},
			rpc: map[string]string{"gen_ai.request.temperature": "0.7", "gen_ai.request.top_p": "0.9", "gen_ai.request.seed": "42",
				"gen_ai.request.max_tokens": "5", "gen_ai.request.stop_sequences": "[six]", "gen_ai.response.finish_reasons": "[length]",
				"toolmesh.history.turns": "4", "toolmesh.history.summarized": "0"},
		},
		{
			name: "compose: stopped by the server at max_tokens",
			call: func(ctx context.Context, s *Service) error {
				_, _, err := composeAll(ctx, composeClient(t, s), &toolmeshv1.ComposeAnswerRequest{Query: "Count.", Generation: gen})
				return err
			},
			model: map[string]string{"gen_ai.request.temperature": "0.7", "gen_ai.request.max_tokens": "5", "gen_ai.request.stop_sequences": "[six]",
				"gen_ai.response.finish_reasons": "[length]", "gen_ai.request.stream": "true"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spans := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			d := llamatest.NewDouble(t, llamatest.DoubleOptions{})
			d.SetDefault(llamatest.Reply{Pieces: []string{"One ", "two ", "three, ", "four ", "five ", "six."}})
			var cfg Config
			cfg.RegisterFlags(flag.NewFlagSet("t", flag.ContinueOnError))
			cfg.LLM.URL, cfg.LLM.NPredict = d.URL, 64
			s, err := New(cfg, nil, telemetry.NewForTest("inference", tp, nil, telemetry.PayloadPolicy{}))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.closer() })

			ctx, rpc := tp.Tracer("test").Start(t.Context(), "rpc")
			if err := tc.call(ctx, s); err != nil {
				t.Fatal(err)
			}
			rpc.End()
			byName := map[string]map[attribute.Key]attribute.Value{}
			for _, sp := range spans.GetSpans().Snapshots() {
				attrs := map[attribute.Key]attribute.Value{}
				for _, a := range sp.Attributes() {
					attrs[a.Key] = a.Value
				}
				byName[sp.Name()] = attrs
			}
			check := func(span string, want map[string]string, none []string) {
				got, ok := byName[span]
				if !ok {
					t.Fatalf("no span %q among %v", span, byName)
				}
				for k, v := range want {
					if a, ok := got[attribute.Key(k)]; !ok || fmt.Sprint(a.AsInterface()) != v {
						t.Errorf("%s span: %s = %v, want %s", span, k, a.AsInterface(), v)
					}
				}
				for _, k := range none {
					if a, ok := got[attribute.Key(k)]; ok {
						t.Errorf("%s span: %s = %v, want none", span, k, a.AsInterface())
					}
				}
			}
			check("chat "+s.cfg.LLM.Model, tc.model, tc.modelNone)
			if tc.rpc != nil {
				check("rpc", tc.rpc, nil)
			}
		})
	}
}
