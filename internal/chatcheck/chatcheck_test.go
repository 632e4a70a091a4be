package chatcheck

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"go.uber.org/goleak"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/errreason"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fieldOf is the field an INVALID_ARGUMENT names.
func fieldOf(t *testing.T, err error) string {
	t.Helper()
	f, ok := errreason.FieldOf(err)
	if !ok {
		t.Fatalf("%v names no field", err)
	}
	return f
}

func TestFunctionsAndGeneration(t *testing.T) {
	obj := &structpb.Struct{Fields: map[string]*structpb.Value{"type": structpb.NewStringValue("object")}}
	arr := &structpb.Struct{Fields: map[string]*structpb.Value{"type": structpb.NewStringValue("array")}}
	cases := []struct {
		name  string
		fns   []*toolmeshv1.Function
		gen   *toolmeshv1.GenerationOptions
		field string
	}{
		{"fine", []*toolmeshv1.Function{{Name: "get_weather", Parameters: obj}, {Name: "get-time"}}, &toolmeshv1.GenerationOptions{MaxTokens: 5, Temperature: proto.Float64(0), Stop: []string{"x"}}, ""},
		{"dotted name", []*toolmeshv1.Function{{Name: "a.b"}}, nil, "functions[0].name"},
		{"long name", []*toolmeshv1.Function{{Name: strings.Repeat("a", 65)}}, nil, "functions[0].name"},
		{"twice", []*toolmeshv1.Function{{Name: "f"}, {Name: "f"}}, nil, "functions[1].name"},
		{"not an object schema", []*toolmeshv1.Function{{Name: "f", Parameters: arr}}, nil, "functions[0].parameters"},
		{"temperature", nil, &toolmeshv1.GenerationOptions{Temperature: proto.Float64(2.5)}, "generation.temperature"},
		{"top_p", nil, &toolmeshv1.GenerationOptions{TopP: proto.Float64(-1)}, "generation.top_p"},
		{"max tokens", nil, &toolmeshv1.GenerationOptions{MaxTokens: -1}, "generation.max_tokens"},
		{"stops", nil, &toolmeshv1.GenerationOptions{Stop: []string{"a", "b", "c", "d", "e"}}, "generation.stop"},
		{"empty stop", nil, &toolmeshv1.GenerationOptions{Stop: []string{""}}, "generation.stop[0]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Functions(tc.fns)
			if err == nil {
				err = Generation(tc.gen)
			}
			switch {
			case tc.field == "" && err != nil:
				t.Fatal(err)
			case tc.field != "" && err == nil:
				t.Fatal("accepted")
			case tc.field != "":
				if f := fieldOf(t, err); f != tc.field {
					t.Errorf("field %q (%v), want %q", f, err, tc.field)
				}
			}
		})
	}
}
