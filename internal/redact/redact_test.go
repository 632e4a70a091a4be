package redact

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"http://127.0.0.1:7801/sse", "http://127.0.0.1:7801/sse"},
		{"https://h.example/sse?api_key=S3CRET", "https://h.example/sse?api_key=REDACTED"},
		{"https://h.example/sse?a=1&token=S3CRET&&b", "https://h.example/sse?a=REDACTED&token=REDACTED&&REDACTED"},
		{"https://user:pass@h.example:8443/mcp", "https://REDACTED@h.example:8443/mcp"},
		{"https://ghp_TOKEN@h.example", "https://REDACTED@h.example"},
		{"https://u:p@ss@h.example/x", "https://REDACTED@h.example/x"},
		{"https://h.example/cb#access_token=S3CRET", "https://h.example/cb#REDACTED"},
		{"https://h.example/a?x=S3CRET#frag", "https://h.example/a?x=REDACTED#REDACTED"},
		{"https://h.example/a/b@c", "https://h.example/a/b@c"}, // an @ in the path is no userinfo
		{"https://h.example?k=v", "https://h.example?k=REDACTED"},
		{"not a url", "not a url"},
		{"https://h.example/%zz?k=S3CRET", "https://h.example/%zz?k=REDACTED"}, // does not parse, still masked
	}
	for _, tt := range tests {
		if got := URL(tt.in); got != tt.want {
			t.Errorf("URL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestText(t *testing.T) {
	tests := []struct{ in, want string }{
		{"no url here", "no url here"},
		{`Get "https://h.example/sse?api_key=S3CRET": dial tcp 10.0.0.1:443: connection refused`,
			`Get "https://h.example/sse?api_key=REDACTED": dial tcp 10.0.0.1:443: connection refused`},
		{"connect https://u:S3CRET@a.example/mcp then http://b.example/sse?k=S3CRET.",
			"connect https://REDACTED@a.example/mcp then http://b.example/sse?k=REDACTED"}, // the value runs to the end
		{`{"url":"https://h.example/?t=S3CRET"}`, `{"url":"https://h.example/?t=REDACTED"}`},
		{`msg=\"https://h.example/?t=S3CRET\"`, `msg=\"https://h.example/?t=REDACTED\"`},
		{"https://h.example/r?to=http://x.example/?t=S3CRET", "https://h.example/r?to=REDACTED"},
		{"a ://b?c=d", "a ://b?c=d"}, // no scheme, no URL
		{"<https://u:S3CRET@h.example>", "<https://REDACTED@h.example>"},
		{"ends with http://", "ends with http://"},
	}
	for _, tt := range tests {
		got := Text(tt.in)
		if got != tt.want {
			t.Errorf("Text(%q)\n got %q\nwant %q", tt.in, got, tt.want)
		}
		if strings.Contains(got, "S3CRET") {
			t.Errorf("Text(%q) = %q still holds the secret", tt.in, got)
		}
	}
}

// TestTextGoErrors feeds Text the errors Go itself makes of a URL with credentials.
func TestTextGoErrors(t *testing.T) {
	raw := "https://user:S3CRET@h.example/sse?api_key=S3CRET"
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []error{
		&url.Error{Op: "Get", URL: raw, Err: errors.New("dial tcp: connection refused")},
		fmt.Errorf("connect: %w", &url.Error{Op: "Post", URL: u.String(), Err: errors.New("EOF")}),
		fmt.Errorf("server %q: %v", "x", u),
	} {
		if got := Text(e.Error()); strings.Contains(got, "S3CRET") {
			t.Errorf("Text(%q) = %q, still holds the secret", e, got)
		}
	}
}

type stringer struct{ s string }

func (s stringer) String() string { return s.s }

type withURL struct {
	Name string
	URL  string
}

func TestHandler(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			var h slog.Handler = slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})
			if format == "json" {
				h = slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})
			}
			const u = "https://u:S3CRET@h.example/sse?api_key=S3CRET"
			logger := slog.New(Handler(h)).With("server", u).WithGroup("g")
			logger.Info("connect "+u+" failed",
				"url", u,
				"err", fmt.Errorf("get %q: refused", u),
				"stringer", stringer{u},
				"struct", withURL{Name: "x", URL: u},
				"lazy", slog.AnyValue(errors.New(u)),
				slog.Group("nested", "url", u),
				"count", 3)
			out := buf.String()
			if strings.Contains(out, "S3CRET") {
				t.Fatalf("log holds the secret:\n%s", out)
			}
			for _, want := range []string{"h.example/sse?api_key=REDACTED", "count", "3"} {
				if !strings.Contains(out, want) {
					t.Errorf("log lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

// TestHandlerUntouched: records without a URL reach the wrapped handler as they are.
func TestHandlerUntouched(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(Handler(slog.NewJSONHandler(&buf, nil)))
	logger.Info("plain", "n", 1, "s", "text", "m", map[string]int{"a": 1})
	if got, want := buf.String(), `"msg":"plain","n":1,"s":"text","m":{"a":1}}`; !strings.HasSuffix(strings.TrimSpace(got), want) {
		t.Errorf("got %s, want it to end with %s", got, want)
	}
	if h := Handler(Handler(slog.DiscardHandler)); h.(handler).Handler != slog.DiscardHandler {
		t.Error("Handler wraps a redacting handler twice")
	}
}

func BenchmarkTextClean(b *testing.B) {
	s := "grpc call method=/toolmesh.v1.ExecutorService/CallTool code=OK duration=1.2ms"
	for b.Loop() {
		_ = Text(s)
	}
}

func BenchmarkTextURL(b *testing.B) {
	s := `Get "https://h.example/sse?api_key=S3CRET": dial tcp 10.0.0.1:443: connection refused`
	for b.Loop() {
		_ = Text(s)
	}
}

func TestQuotes(t *testing.T) {
	for in, want := range map[string]string{
		"yaml: unmarshal errors:\n  line 1: cannot unmarshal !!str `root:x:0:0:SECRET` into map": "yaml: unmarshal errors:\n  line 1: cannot unmarshal !!str … into map",
		`config: unknown key "api_key" (keys are flag names)`:                                    `config: unknown key "api_key" (keys are flag names)`,
		`mcp server "x": url: "https://user:pw@h/" is not valid`:                                 `mcp server "x": url: … is not valid`,
		`a "quoted \"inner\" run" and more`:                                                      "a … and more",
		"line 4, column 5: invalid character":                                                    "line 4, column 5: invalid character",
	} {
		if got := Quotes(in); got != want {
			t.Errorf("Quotes(%q) = %q, want %q", in, got, want)
		}
	}
}
