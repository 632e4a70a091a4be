package policy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/errreason"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestGlob(t *testing.T) {
	cases := []struct {
		pat, s string
		want   bool
	}{
		{"add", "add", true},
		{"add", "adds", false},
		{"*", "", true},
		{"*", "anything", true},
		{"list_*", "list_tables", true},
		{"list_*", "list_", true},
		{"list_*", "lis", false},
		{"*_tables", "list_tables", true},
		{"*_tables", "list_tablesx", false},
		{"q?ery", "query", true},
		{"q?ery", "qery", false},
		{"a*b*c", "aXXbYYc", true},
		{"a*b*c", "aXXbYY", false},
		{"*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false},
		{"secret_*", "secret_dump", true},
		{"**", "x", true},
	}
	for _, tc := range cases {
		if got := compileGlob(tc.pat).match(tc.s); got != tc.want {
			t.Errorf("%q matches %q = %v, want %v", tc.pat, tc.s, got, tc.want)
		}
	}
}

func boolp(b bool) *bool { return &b }

func tool(id string, readOnly, destructive *bool) *toolmeshv1.Tool {
	t := &toolmeshv1.Tool{Id: id}
	if readOnly != nil || destructive != nil {
		t.Annotations = &toolmeshv1.ToolAnnotations{ReadOnlyHint: readOnly, DestructiveHint: destructive}
	}
	return t
}

// testConfig is a config as an operator writes it, parsed the way the app parses it.
func testConfig(t *testing.T) Config {
	t.Helper()
	var doc struct {
		Policy any `yaml:"policy"`
	}
	const src = `
policy:
  default: {call: [calculator], query: true}
  tokens:
    root: {call: ["*"], query: true}
    calc: {call: [calculator, "converter.c*"]}
    lister: {call: [], list: ["sqlite.list_*"], search: []}
    globby: {call: ["sql*.list_tables", "calc?lator.add"]}
`
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseYAML(doc.Policy)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Servers = map[string]ServerRules{
		"notes": {ExcludedTools: []string{"secret_*"}},
		"admin": {AllowedTools: []string{"wipe_*", "status"}, AllowDestructive: true},
	}
	return cfg
}

func TestDecisions(t *testing.T) {
	p, err := New(testConfig(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	root, calc, lister, globby := Caller{Token: "root"}, Caller{Token: "calc"}, Caller{Token: "lister"}, Caller{Token: "globby"}
	cases := []struct {
		name   string
		got    *Denial
		rule   Rule   // "" means allowed
		reason string // the message contains this
	}{
		{"root calls anything", p.Call(root, "sqlite.query_database"), "", ""},
		{"the request's servers bound a direct call", p.Call(Caller{Token: "root", Servers: []string{"calculator"}}, "sqlite.list_tables"), RuleServers, "the request's servers are calculator"},
		{"within the request's servers", p.Call(Caller{Token: "root", Servers: []string{"calculator", "sqlite"}}, "sqlite.list_tables"), "", ""},
		{"an excluded tool cannot be called", p.Call(root, "notes.secret_dump"), RuleExcludedTools, `mcpServers.notes.excludedTools has "secret_*"`},
		{"an excluded tool cannot be listed", p.List(root, "notes.secret_dump"), RuleExcludedTools, ""},
		{"others of that server can", p.Call(root, "notes.read_page"), "", ""},
		{"allowedTools leaves the rest out", p.Call(root, "admin.drop_all"), RuleAllowedTools, "no pattern of mcpServers.admin.allowedTools"},
		{"allowedTools lets its tools in", p.Call(root, "admin.wipe_cache"), "", ""},
		{"a token calls its servers", p.Call(calc, "calculator.add"), "", ""},
		{"a token calls its globs", p.Call(calc, "converter.celsius_to_fahrenheit"), "", ""},
		{"a token does not call beyond its scope", p.Call(calc, "sqlite.list_tables"), RuleScope, `token "calc" may call only calculator, converter.c* (policy.tokens.calc.call)`},
		{"glob beyond its scope", p.Call(calc, "converter.feet_to_meters"), RuleScope, ""},
		{"list defaults to call", p.List(calc, "calculator.add"), "", ""},
		{"list defaults to call, out of scope", p.List(calc, "sqlite.list_tables"), RuleScope, "policy.tokens.calc.list"},
		{"search defaults to call", p.Search(calc, "sqlite.list_tables"), RuleScope, "policy.tokens.calc.search"},
		{"a token without query may not ask", p.Ask(calc), RuleQuery, `token "calc" may not ask questions (policy.tokens.calc.query is not true)`},
		{"a token with query may ask", p.Ask(root), "", ""},
		{"an unknown token gets the default", p.Call(Caller{Token: "stranger"}, "calculator.add"), "", ""},
		{"the default bounds it", p.Call(Caller{Token: "stranger"}, "sqlite.list_tables"), RuleScope, "policy.default.call"},
		{"no token gets the default", p.Ask(Caller{}), "", ""},
		{"list scope apart from call", p.List(lister, "sqlite.list_tables"), "", ""},
		{"list scope apart from call, out", p.List(lister, "sqlite.query_database"), RuleScope, ""},
		{"call: [] calls nothing", p.Call(lister, "sqlite.list_tables"), RuleScope, "may call only none"},
		{"search: [] searches nothing", p.MaySearch(lister), RuleScope, `token "lister" may search no tools (policy.tokens.lister.search is empty)`},
		{"a list scope may list", p.MayList(lister), "", ""},
		{"glob in the server part", p.Call(globby, "sqlite.list_tables"), "", ""},
		{"? in the server part", p.Call(globby, "calculator.add"), "", ""},
		{"glob in the server part, out", p.Call(globby, "sqlite.query_database"), RuleScope, ""},
		{"a read-only tool is offered", p.Offer(root, tool("notes.read_page", boolp(true), nil)), "", ""},
		{"a tool without annotations may be destructive", p.Offer(root, tool("notes.delete_note", nil, nil)), RuleDestructive, "mcpServers.notes does not set allowDestructive: true"},
		{"destructiveHint: true", p.Offer(root, tool("notes.delete_note", boolp(false), boolp(true))), RuleDestructive, ""},
		{"destructiveHint: false is offered", p.Offer(root, tool("notes.append_note", boolp(false), boolp(false))), "", ""},
		{"readOnlyHint wins over destructiveHint", p.Offer(root, tool("notes.read_page", boolp(true), boolp(true))), "", ""},
		{"allowDestructive opts a server in", p.Offer(root, tool("admin.wipe_cache", nil, boolp(true))), "", ""},
		{"an offer needs the call scope", p.Offer(calc, tool("sqlite.list_tables", boolp(true), nil)), RuleScope, ""},
		{"an offer needs the request's servers", p.Offer(Caller{Token: "root", Servers: []string{"notes"}}, tool("sqlite.list_tables", boolp(true), nil)), RuleServers, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			switch {
			case tc.rule == "" && tc.got != nil:
				t.Fatalf("denied: %v; want allowed", tc.got)
			case tc.rule == "":
				return
			case tc.got == nil:
				t.Fatalf("allowed; want denied by rule %s", tc.rule)
			case tc.got.Rule != tc.rule:
				t.Errorf("rule = %s (%v); want %s", tc.got.Rule, tc.got, tc.rule)
			}
			if !strings.Contains(tc.got.Error(), tc.reason) {
				t.Errorf("message %q; want it to contain %q", tc.got.Error(), tc.reason)
			}
		})
	}
}

// TestOneDenialOutOfScope: a caller refused a tool its scope does not cover gets the same
// refusal (rule, message, gRPC status and details, the tool id aside) whether the server's
// rules exclude that tool, leave it out of allowedTools, or not: the difference would tell it
// what the operator hides on a server it may not see. A caller whose scope covers the tool is
// told the server's rule, as a caller of a mesh without scopes is.
func TestOneDenialOutOfScope(t *testing.T) {
	p, err := New(testConfig(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	// plain is a tool of each server that no server rule refuses; the others are refused by
	// notes' excludedTools and admin's allowedTools.
	pairs := []struct{ plain, hidden string }{
		{"notes.read_page", "notes.secret_dump"},
		{"admin.status", "admin.drop_all"},
	}
	actions := []struct {
		name string
		of   func(Caller, string) *Denial
	}{
		{"call", p.Call}, {"list", p.List}, {"search", p.Search},
		{"offer", func(c Caller, id string) *Denial { return p.Offer(c, tool(id, boolp(true), nil)) }},
	}
	// form is everything a client reads of d, with the tool id made neutral.
	form := func(d *Denial, id string) string {
		if d == nil {
			return "allowed"
		}
		st := d.GRPCStatus()
		var md map[string]string
		for _, det := range st.Details() {
			if ei, ok := det.(*errdetails.ErrorInfo); ok {
				md = ei.GetMetadata()
			}
		}
		return strings.ReplaceAll(fmt.Sprintf("%s|%s|%s|%s|%v", d.Rule, d.Reason, st.Code(), st.Message(), md), id, "TOOL")
	}
	for _, c := range []Caller{{Token: "calc"}, {Token: "stranger"}, {Token: "lister"}, {Token: "calc", Servers: []string{"notes", "admin"}}} {
		for _, a := range actions {
			for _, pair := range pairs {
				plain, hidden := a.of(c, pair.plain), a.of(c, pair.hidden)
				if plain == nil || plain.Rule != RuleScope {
					t.Fatalf("%+v %s %s: %v; want refused by its scope (the test's premise)", c, a.name, pair.plain, plain)
				}
				if got, want := form(hidden, pair.hidden), form(plain, pair.plain); got != want {
					t.Errorf("%+v %s: %s is refused as\n  %s\nand %s as\n  %s\nwant one refusal", c, a.name, pair.hidden, got, pair.plain, want)
				}
			}
		}
	}
	// Within its scope the server's rule is the reason.
	for _, tc := range []struct {
		c    Caller
		id   string
		rule Rule
	}{
		{Caller{Token: "root"}, "notes.secret_dump", RuleExcludedTools},
		{Caller{Token: "root"}, "admin.drop_all", RuleAllowedTools},
		{Caller{Token: "root", Servers: []string{"notes"}}, "notes.secret_dump", RuleExcludedTools},
	} {
		if d := p.Call(tc.c, tc.id); d == nil || d.Rule != tc.rule {
			t.Errorf("%+v call %s: %v; want refused by %s", tc.c, tc.id, d, tc.rule)
		}
	}
}

func TestWithoutScopes(t *testing.T) {
	p, err := New(Config{Servers: map[string]ServerRules{"notes": {ExcludedTools: []string{"secret_*"}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []Caller{{}, {Token: "anyone"}} {
		if d := p.Call(c, "sqlite.query_database"); d != nil {
			t.Errorf("%+v: %v; want every tool callable without scopes", c, d)
		}
		if d := p.Ask(c); d != nil {
			t.Errorf("%+v: %v; want questions allowed without scopes", c, d)
		}
		if d := p.Call(c, "notes.secret_dump"); d == nil || d.Rule != RuleExcludedTools {
			t.Errorf("%+v: excluded tool: %v; want denied by excludedTools", c, d)
		}
	}
	if p.Exists("notes", "secret_dump") || !p.Exists("notes", "read_page") || !p.Exists("other", "secret_dump") {
		t.Error("Exists does not follow notes' excludedTools alone")
	}
	if _, ok := p.Servers(Caller{}, Call); ok {
		t.Error("CallServers bounds the servers without a scope")
	}
	var nilPolicy *Policy
	if d := nilPolicy.Call(Caller{}, "a.b"); d != nil {
		t.Errorf("nil policy: %v", d)
	}
}

func TestScopedWithoutEntry(t *testing.T) {
	p, err := New(Config{Tokens: map[string]Scope{"ops": {Call: []string{"*"}, Query: true}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []Caller{{}, {Token: "ci"}} {
		d := p.Call(c, "calculator.add")
		if d == nil || d.Rule != RuleScope || !strings.Contains(d.Reason, "no entry under policy.tokens and there is no policy.default") {
			t.Errorf("%+v: %v; want denied for want of a scope", c, d)
		}
		if p.ListsServer(c, "calculator") {
			t.Errorf("%+v lists calculator without a scope", c)
		}
	}
	if servers, ok := p.Servers(Caller{Token: "ci"}, Call); !ok || len(servers) != 0 {
		t.Errorf("CallServers without a scope = %v, %v; want none, bounded", servers, ok)
	}
}

func TestListsAll(t *testing.T) {
	p, err := New(testConfig(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	unscoped, err := New(Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		p    *Policy
		c    Caller
		want bool
	}{
		{"every tool in scope", p, Caller{Token: "root"}, true},
		{"some servers", p, Caller{Token: "calc"}, false},
		{"a glob over servers is not every tool", p, Caller{Token: "globby"}, false},
		{"the default scope", p, Caller{Token: "stranger"}, false},
		{"no scopes at all", unscoped, Caller{}, true},
		{"a nil policy", nil, Caller{}, true},
	}
	for _, tc := range cases {
		if got := tc.p.ListsAll(tc.c); got != tc.want {
			t.Errorf("%s: ListsAll(%+v) = %v, want %v", tc.name, tc.c, got, tc.want)
		}
	}
	noEntry, err := New(Config{Tokens: map[string]Scope{"ops": {Call: []string{"*"}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if noEntry.ListsAll(Caller{Token: "ci"}) || !noEntry.ListsAll(Caller{Token: "ops"}) {
		t.Error("ListsAll: want false for a token without an entry, true for ops (*)")
	}
}

func TestServers(t *testing.T) {
	p, err := New(testConfig(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		token string
		want  string
		ok    bool
	}{
		{"root", "", false},
		{"calc", "calculator converter", true},
		{"globby", "", false},
	}
	for _, tc := range cases {
		got, ok := p.Servers(Caller{Token: tc.token}, Call)
		if strings.Join(got, " ") != tc.want || ok != tc.ok {
			t.Errorf("%s: %v, %v; want %q, %v", tc.token, got, ok, tc.want, tc.ok)
		}
	}
	within := []struct {
		token     string
		requested []string
		want      string
		ok        bool
	}{
		{"root", []string{"sqlite"}, "sqlite", true},
		{"root", nil, "", true},
		{"calc", nil, "calculator converter", true},
		{"calc", []string{"sqlite", "calculator"}, "calculator", true},
		{"calc", []string{"sqlite"}, "", false},
	}
	for _, tc := range within {
		got, ok := p.Within(Caller{Token: tc.token}, Call, tc.requested)
		if strings.Join(got, " ") != tc.want || ok != tc.ok {
			t.Errorf("Within(%s, %v) = %v, %v; want %q, %v", tc.token, tc.requested, got, ok, tc.want, tc.ok)
		}
	}
}

func TestDenialStatus(t *testing.T) {
	p, err := New(testConfig(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	d := p.Record(context.Background(), p.Call(Caller{Token: "calc"}, "sqlite.list_tables"))
	var err2 error = d
	st, ok := status.FromError(err2)
	if !ok || st.Code() != codes.PermissionDenied || !strings.Contains(st.Message(), "sqlite.list_tables") || !strings.Contains(st.Message(), "rule: scope") {
		t.Fatalf("status = %v; want PermissionDenied naming the tool and the rule", st)
	}
	var info *errdetails.ErrorInfo
	for _, det := range st.Details() {
		if ei, ok := det.(*errdetails.ErrorInfo); ok {
			info = ei
		}
	}
	if info == nil || info.GetReason() != errreason.PolicyDenied || errreason.Of(err2) != errreason.PolicyDenied || info.GetMetadata()["tool"] != "sqlite.list_tables" || info.GetMetadata()["rule"] != "scope" || info.GetMetadata()["action"] != "call" {
		t.Errorf("ErrorInfo = %v", info)
	}
	var back *Denial
	if !errors.As(err2, &back) || back.Rule != RuleScope {
		t.Errorf("errors.As(*Denial) = %v", back)
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct{ src, want string }{
		{`policy: [a]`, "policy: want a map"},
		{`policy: {tokenz: {}}`, "policy.tokenz: unknown key"},
		{`policy: {tokens: {"bad name": {call: ["*"]}}}`, "policy.tokens.bad name: a token name is"},
		{`policy: {tokens: {ci: {call: "calculator", qurey: true}}}`, "policy.tokens.ci.qurey: unknown key"},
		{`policy: {tokens: {ci: {call: [1]}}}`, "policy.tokens.ci.call[0]: want a string"},
		{`policy: {tokens: {ci: {call: ["Calc.add"]}}}`, `policy.tokens.ci.call[0]: "Calc.add" has a server part that is not a server name`},
		{`policy: {tokens: {ci: {call: ["calc."]}}}`, "has no tool part after the dot"},
		{`policy: {tokens: {ci: {call: [".add"]}}}`, "has no server part"},
		{`policy: {tokens: {ci: {query: "yes"}}}`, "policy.tokens.ci.query: want true or false"},
		{`policy: {default: {call: {a: 1}}}`, "policy.default.call: want a list of tool patterns"},
	}
	for _, tc := range cases {
		var doc struct {
			Policy any `yaml:"policy"`
		}
		if err := yaml.Unmarshal([]byte(tc.src), &doc); err != nil {
			t.Fatal(err)
		}
		_, err := ParseYAML(doc.Policy)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error with %q", tc.src, err, tc.want)
		}
	}
	_, err := New(Config{Servers: map[string]ServerRules{"s": {ExcludedTools: []string{"a b"}}}}, nil)
	if err == nil || !strings.Contains(err.Error(), `mcpServers.s.excludedTools[0]: "a b" has a space`) {
		t.Errorf("bad excludedTools: %v", err)
	}
}

// TestRecord: a denial is counted by action and rule only, and marked on the span with the tool.
func TestRecord(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	p, err := New(testConfig(t), mp.Meter("test"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, span := tp.Tracer("test").Start(context.Background(), "request")
	for _, id := range []string{"sqlite.list_tables", "sqlite.query_database"} {
		p.Record(ctx, p.Call(Caller{Token: "calc"}, id))
	}
	p.Record(ctx, p.Offer(Caller{Token: "root"}, tool("notes.delete_note", nil, nil)))
	span.End()

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "toolmesh.policy.denials" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if dp.Attributes.Len() != 2 {
					t.Errorf("labels %v; want action and rule only", dp.Attributes.ToSlice())
				}
				a, _ := dp.Attributes.Value("toolmesh.policy.action")
				r, _ := dp.Attributes.Value("toolmesh.policy.rule")
				got[a.AsString()+"/"+r.AsString()] += dp.Value
			}
		}
	}
	if want := map[string]int64{"call/scope": 2, "offer/allowDestructive": 1}; !maps.Equal(got, want) {
		t.Errorf("toolmesh.policy.denials = %v; want %v", got, want)
	}

	ended := spans.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans", len(ended))
	}
	var tools []string
	for _, ev := range ended[0].Events() {
		for _, kv := range ev.Attributes {
			if kv.Key == "gen_ai.tool.name" && ev.Name == "toolmesh.policy.denied" {
				tools = append(tools, kv.Value.AsString())
			}
		}
	}
	if !slices.Equal(tools, []string{"sqlite.list_tables", "sqlite.query_database", "notes.delete_note"}) {
		t.Errorf("span events name %v", tools)
	}
	var rule string
	for _, kv := range ended[0].Attributes() {
		if kv.Key == "toolmesh.policy.denied_rule" {
			rule = kv.Value.AsString()
		}
	}
	if rule != "scope" {
		t.Errorf("toolmesh.policy.denied_rule = %q; want scope (a withheld offer does not set it)", rule)
	}
}

// TestSetServers: a reload replaces the servers' rules and keeps the token scopes; rules that
// do not compile change nothing.
func TestSetServers(t *testing.T) {
	p, err := New(Config{Servers: map[string]ServerRules{"notes": {ExcludedTools: []string{"secret_*"}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	destructive := &toolmeshv1.Tool{Id: "notes.delete_note", Annotations: &toolmeshv1.ToolAnnotations{DestructiveHint: proto.Bool(true)}}
	steps := []struct {
		name    string
		rules   map[string]ServerRules
		wantErr string
		// what follows the step
		exists, offered bool
	}{
		{name: "at start", exists: false, offered: false},
		{name: "allowDestructive and no exclusion", rules: map[string]ServerRules{"notes": {AllowDestructive: true}}, exists: true, offered: true},
		{name: "bad glob", rules: map[string]ServerRules{"notes": {AllowedTools: []string{"get *"}}}, wantErr: "mcpServers.notes.allowedTools[0]", exists: true, offered: true},
		{name: "server removed", rules: nil, exists: true, offered: false},
	}
	for _, st := range steps {
		if st.name != "at start" {
			err := p.SetServers(st.rules)
			if st.wantErr == "" && err != nil || st.wantErr != "" && (err == nil || !strings.Contains(err.Error(), st.wantErr)) {
				t.Errorf("%s: SetServers = %v, want error %q", st.name, err, st.wantErr)
			}
		}
		if got := p.Exists("notes", "secret_dump"); got != st.exists {
			t.Errorf("%s: Exists(notes.secret_dump) = %v, want %v", st.name, got, st.exists)
		}
		if got := p.Offer(Caller{}, destructive) == nil; got != st.offered {
			t.Errorf("%s: destructive tool offered = %v, want %v", st.name, got, st.offered)
		}
	}
	var nilPolicy *Policy
	if err := nilPolicy.SetServers(nil); err == nil {
		t.Error("SetServers on a nil policy succeeded")
	}
}
