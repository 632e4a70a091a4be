package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/eventually"
	"github.com/toolmesh/toolmesh/internal/mcpconfig"
	"github.com/toolmesh/toolmesh/services/executor"
)

// configMap lays out a directory as the kubelet does for a mounted ConfigMap: the data in a
// timestamped directory, ..data a symlink to it, and each file a symlink through ..data. An
// update writes a new timestamped directory and swaps ..data with a rename, so the file's
// own path never changes.
type configMap struct {
	dir string
	n   int
}

func (c *configMap) path() string { return filepath.Join(c.dir, "mcp.json") }

func (c *configMap) write(t *testing.T, content string) {
	t.Helper()
	c.n++
	ts := fmt.Sprintf("..2026_12_03_20_00_%02d.%d", c.n, c.n)
	if err := os.Mkdir(filepath.Join(c.dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.dir, ts, "mcp.json"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(c.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	prev, _ := os.Readlink(filepath.Join(c.dir, "..data"))
	if err := os.Rename(tmp, filepath.Join(c.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if prev == "" {
		if err := os.Symlink(filepath.Join("..data", "mcp.json"), c.path()); err != nil {
			t.Fatal(err)
		}
	} else if err := os.RemoveAll(filepath.Join(c.dir, prev)); err != nil {
		t.Fatal(err)
	}
}

// current is the file ..data points to now: writing it in place is an edit no watch of the
// directory sees (SIGHUP's case).
func (c *configMap) current(t *testing.T) string {
	t.Helper()
	target, err := os.Readlink(filepath.Join(c.dir, "..data"))
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(c.dir, target, "mcp.json")
}

// oneTool serves one read-only tool answering reply, over streamable HTTP.
func oneTool(t *testing.T, server, name, desc, reply string) string {
	t.Helper()
	return serveTools(t, server, []mcpserver.ServerTool{{
		Tool: mcp.NewTool(name, mcp.WithDescription(desc), mcp.WithReadOnlyHintAnnotation(true)),
		Handler: func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(reply), nil
		},
	}})
}

func mcpJSON(servers map[string]string) string {
	m := map[string]any{}
	for name, url := range servers {
		m[name] = map[string]string{"url": url}
	}
	b, _ := json.Marshal(map[string]any{"mcpServers": m})
	return string(b)
}

// toolIDs lists the tools the api lists.
func toolIDs(t *testing.T, base string) ([]string, string) {
	t.Helper()
	code, body := get(t, base+"/v1/tools")
	var list struct {
		Tools []struct{ ID string } `json:"tools"`
	}
	if err := json.Unmarshal(body, &list); err != nil || code != http.StatusOK {
		return nil, fmt.Sprintf("GET /v1/tools: %d %s", code, body)
	}
	var ids []string
	for _, tl := range list.Tools {
		ids = append(ids, tl.ID)
	}
	slices.Sort(ids)
	return ids, ""
}

// searched is the tools a search for q finds, best first.
func searched(t *testing.T, base, q string) []string {
	t.Helper()
	code, body := get(t, base+"/v1/tools:search?k=10&q="+strings.ReplaceAll(q, " ", "+"))
	var found struct {
		Results []struct {
			Tool struct {
				ID string `json:"id"`
			} `json:"tool"`
		} `json:"results"`
	}
	if err := json.Unmarshal(body, &found); err != nil || code != http.StatusOK {
		t.Fatalf("search %q: %d %s", q, code, body)
	}
	var ids []string
	for _, r := range found.Results {
		ids = append(ids, r.Tool.ID)
	}
	return ids
}

func connectedAt(t *testing.T, base, server string) string {
	t.Helper()
	code, body := get(t, base+"/v1/servers")
	var list struct {
		Servers []struct {
			Name        string `json:"name"`
			ConnectedAt string `json:"connectedAt"`
		} `json:"servers"`
	}
	if err := json.Unmarshal(body, &list); err != nil || code != http.StatusOK {
		t.Fatalf("GET /v1/servers: %d %s", code, body)
	}
	for _, s := range list.Servers {
		if s.Name == server {
			return s.ConnectedAt
		}
	}
	return ""
}

// ping calls keep.ping through the api; it runs off the test's goroutine, so it returns
// what went wrong instead of failing the test.
func ping(base string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/tools/keep/ping:call", strings.NewReader(`{"arguments":{}}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "pong") {
		return fmt.Errorf("%d %s", resp.StatusCode, body)
	}
	return nil
}

// TestReloadConfigMapSwap is issue 20's reload test: under a running mesh (executor,
// retriever and api in one process), the --mcp-config file is replaced as Kubernetes
// replaces a mounted ConfigMap, adding one server, removing one and changing one. Calls to
// the untouched server never fail and its session is kept, the index follows within
// seconds, a broken file leaves everything as it was (and says so on /readyz and in the
// metrics), and SIGHUP reloads an edit no watch sees.
func TestReloadConfigMapSwap(t *testing.T) {
	checkFDs(t)
	keep := oneTool(t, "keep", "ping", "Answer pong to a ping.", "pong")
	gone := oneTool(t, "gone", "forecast_weather", "Forecast tomorrow's weather in a city.", "sunny")
	edit := oneTool(t, "edit", "convert_currency", "Convert an amount of money between currencies.", "42 EUR")
	edited := oneTool(t, "edit", "translate_text", "Translate a text into another language.", "bonjour")
	fresh := oneTool(t, "fresh", "count_narwhals", "Count the narwhals of a fjord in the migration census.", "17")

	cm := &configMap{dir: t.TempDir()}
	before := mcpJSON(map[string]string{"keep": keep, "gone": gone, "edit": edit})
	cm.write(t, before)
	a, _ := runApp(t, []string{
		"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--executor.grpc-addr=127.0.0.1:0",
		"--retriever.grpc-addr=127.0.0.1:0", "--api.inference-addr=", "--drain-timeout=2s", "--mcp-config=" + cm.path(),
	}, "executor", "retriever", "api")
	var base string
	for _, e := range a.Endpoints {
		if e.Name == "REST" {
			base = e.Addr
		}
	}
	eventually.Check(t, 30*time.Second, "the mesh ready", func() string {
		if code, body := get(t, base+"/readyz"); code != http.StatusOK {
			return fmt.Sprintf("%d %s", code, body)
		}
		return ""
	})
	if ids := searched(t, base, "weather forecast"); len(ids) == 0 || ids[0] != "gone.forecast_weather" {
		t.Fatalf("search before the reload: %v, want gone.forecast_weather first", ids)
	}
	keptSince := connectedAt(t, base, "keep")

	// Calls to the untouched server, one after the other, for the whole test.
	stop := make(chan struct{})
	var calls, failed atomic.Int64
	var firstFailure atomic.Value
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			calls.Add(1)
			if err := ping(base); err != nil {
				failed.Add(1)
				firstFailure.CompareAndSwap(nil, err.Error())
			}
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
		if n := failed.Load(); n > 0 {
			t.Errorf("%d of %d calls to the untouched server failed; first: %v", n, calls.Load(), firstFailure.Load())
		} else {
			t.Logf("%d calls to the untouched server, none failed", calls.Load())
		}
	}()
	time.Sleep(200 * time.Millisecond)

	after := mcpJSON(map[string]string{"keep": keep, "edit": edited, "fresh": fresh})
	swapped := time.Now()
	cm.write(t, after)
	wantIDs := []string{"edit.translate_text", "fresh.count_narwhals", "keep.ping"}
	eventually.Check(t, 10*time.Second, "the catalog and the index follow the new config", func() string {
		if ids, bad := toolIDs(t, base); bad != "" || !slices.Equal(ids, wantIDs) {
			return fmt.Sprintf("tools %v %s; want %v", ids, bad, wantIDs)
		}
		if ids := searched(t, base, "narwhals census"); len(ids) == 0 || ids[0] != "fresh.count_narwhals" {
			return fmt.Sprintf("search for the added server's tool: %v", ids)
		}
		if ids := searched(t, base, "translate text language"); len(ids) == 0 || ids[0] != "edit.translate_text" {
			return fmt.Sprintf("search for the changed server's new tool: %v", ids)
		}
		for _, q := range []string{"weather forecast", "convert currency money"} {
			if ids := searched(t, base, q); slices.ContainsFunc(ids, func(id string) bool {
				return strings.HasPrefix(id, "gone.") || id == "edit.convert_currency"
			}) {
				return fmt.Sprintf("search %q still finds a tool that is gone: %v", q, ids)
			}
		}
		return ""
	})
	t.Logf("the index followed the swap in %s", time.Since(swapped).Round(time.Millisecond))
	if code, body := post(t, base+"/v1/tools/edit/translate_text:call", `{"arguments":{}}`); code != http.StatusOK || !strings.Contains(string(body), "bonjour") {
		t.Errorf("the changed server's new tool: %d %s", code, body)
	}
	if code, body := post(t, base+"/v1/tools/gone/forecast_weather:call", `{"arguments":{}}`); code != http.StatusNotFound {
		t.Errorf("the removed server's tool: %d %s, want 404", code, body)
	}

	// Broken files: refused, everything as it was, and said so.
	for _, tc := range []struct{ name, content, want string }{
		{"not JSON", `{"mcpServers": {"keep": `, "mcp.json"},
		{"a server with neither url nor command", mcpJSON(map[string]string{"keep": keep, "bad": ""}), `"bad"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm.write(t, tc.content)
			eventually.Check(t, 10*time.Second, "the refusal reported on /readyz", func() string {
				code, body := get(t, base+"/readyz")
				var ready struct {
					Config struct {
						LastReloadError string `json:"last_reload_error"`
					} `json:"config"`
				}
				_ = json.Unmarshal(body, &ready)
				if code != http.StatusOK || !strings.Contains(ready.Config.LastReloadError, tc.want) {
					return fmt.Sprintf("%d %s; want 200 and config.last_reload_error with %s", code, body, tc.want)
				}
				return ""
			})
			if ids, bad := toolIDs(t, base); !slices.Equal(ids, wantIDs) {
				t.Errorf("tools after a refused reload: %v %s; want %v", ids, bad, wantIDs)
			}
		})
	}
	_, metrics := get(t, base+"/metrics")
	if !strings.Contains(string(metrics), `toolmesh_config_reloads_total{`) || !strings.Contains(string(metrics), `result="error"`) ||
		!strings.Contains(string(metrics), "toolmesh_config_last_reload_successful") {
		t.Errorf("/metrics has no toolmesh_config_reloads_total{result=\"error\"} or toolmesh_config_last_reload_successful")
	}

	// An edit of the file ..data points to, which no watch of the directory sees: SIGHUP.
	cm.write(t, after)
	eventually.Check(t, 10*time.Second, "the good config applied again", func() string {
		if code, body := get(t, base+"/readyz"); code != http.StatusOK || strings.Contains(string(body), "last_reload_error") {
			return fmt.Sprintf("%d %s", code, body)
		}
		return ""
	})
	if err := os.WriteFile(cm.current(t), []byte(mcpJSON(map[string]string{"keep": keep, "edit": edited, "fresh": fresh, "gone": gone})), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually.Check(t, 10*time.Second, "the removed server back after SIGHUP", func() string {
		if ids, bad := toolIDs(t, base); !slices.Contains(ids, "gone.forecast_weather") {
			return fmt.Sprintf("tools %v %s", ids, bad)
		}
		return ""
	})

	if got := connectedAt(t, base, "keep"); got != keptSince {
		t.Errorf("the untouched server reconnected: connected at %s, then %s", keptSince, got)
	}
}

// TestReloaderYAML reloads the inline mcpServers of a --config file, edited as an editor
// saves (a new file renamed over), into an executor.
func TestReloaderYAML(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolmesh.yaml")
	save := func(content string) {
		t.Helper()
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	const a = "  a: {url: http://127.0.0.1:1/mcp}\n"
	const b = "  b: {command: /bin/cat}\n"
	save("executor: {call-timeout: 30s}\nmcpServers:\n" + a)
	// demo stands for `up`'s demo servers, which no file declares: every reload keeps them.
	demo := map[string]mcpconfig.Server{"demo": {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://127.0.0.1:2/mcp"}}
	var logs strings.Builder
	var logMu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return logs.Write(p)
	}), nil))
	exec, err := executor.New(executor.Config{Servers: map[string]mcpconfig.Server{
		"a":    {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://127.0.0.1:1/mcp"},
		"demo": demo["demo"],
	}}, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := newReloader(Config{ConfigFile: path}, demo, []reloadTarget{{"executor", exec}}, log)
	state := func() string {
		resp, err := exec.ListServers(context.Background(), &toolmeshv1.ExecutorServiceListServersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range resp.GetServers() {
			names = append(names, s.GetName())
		}
		c := resp.GetConfig()
		return fmt.Sprintf("%v gen=%d reloaded=%v err=%q", names, c.GetGeneration(), c.GetLastReloadAt() != nil, c.GetLastReloadError())
	}

	steps := []struct {
		name    string
		content string // "" keeps the file as it is
		force   bool
		wantErr string
		want    string
		wantLog string
	}{
		{name: "same bytes", want: `[a demo] gen=1 reloaded=false err=""`},
		{name: "SIGHUP, same bytes", force: true, want: `[a demo] gen=1 reloaded=true err=""`, wantLog: "no server changed"},
		{name: "server added", content: "executor: {call-timeout: 30s}\nmcpServers:\n" + a + b, want: `[a b demo] gen=2 reloaded=true err=""`},
		{name: "other key changed", content: "executor: {call-timeout: 5s}\nmcpServers:\n" + a + b, want: `[a b demo] gen=2 reloaded=true err=""`, wantLog: "apply at the next restart"},
		{name: "broken YAML", content: "executor: {call-timeout: 5s\nmcpServers:\n" + a, wantErr: "toolmesh.yaml", want: `[a b demo] gen=2 reloaded=true err="config `},
		{name: "bad server", content: "mcpServers:\n  a: {transport: sse}\n", wantErr: "url: required", want: `[a b demo] gen=2 reloaded=true err="config `},
		{name: "server removed", content: "executor: {call-timeout: 5s}\nmcpServers:\n" + b, want: `[b demo] gen=3 reloaded=true err=""`},
	}
	for _, st := range steps {
		if st.content != "" {
			save(st.content)
		}
		err := r.reload(st.force)
		if st.wantErr == "" && err != nil || st.wantErr != "" && (err == nil || !strings.Contains(err.Error(), st.wantErr)) {
			t.Errorf("%s: reload = %v, want error %q", st.name, err, st.wantErr)
		}
		if got := state(); !strings.HasPrefix(got, st.want) {
			t.Errorf("%s: executor %s, want %s", st.name, got, st.want)
		}
		logMu.Lock()
		got := logs.String()
		logs.Reset()
		logMu.Unlock()
		if st.wantLog != "" && !strings.Contains(got, st.wantLog) {
			t.Errorf("%s: log %q, want %q in it", st.name, got, st.wantLog)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestReloaderHalfWritten: a config file being written is applied only once it has stopped
// changing, and never when a rule key has no value; a FIFO or an oversized file is refused at
// once; a refusal's reason says where the problem is without quoting the file.
func TestReloaderHalfWritten(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "toolmesh.yaml")
	const whole = "mcpServers:\n  notes:\n    url: http://127.0.0.1:1/mcp\n    excludedTools: [\"secret_*\"]\n"
	if err := os.WriteFile(path, []byte(whole), 0o600); err != nil {
		t.Fatal(err)
	}
	exec, err := executor.New(executor.Config{Servers: map[string]mcpconfig.Server{
		"notes": {Transport: mcpconfig.TransportStreamableHTTP, URL: "http://127.0.0.1:1/mcp", ExcludedTools: []string{"secret_*"}},
	}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := newReloader(Config{ConfigFile: path}, nil, []reloadTarget{{"executor", exec}}, slog.New(slog.DiscardHandler))
	r.settle = func() {}
	state := func() (uint64, string) {
		resp, err := exec.ListServers(context.Background(), &toolmeshv1.ExecutorServiceListServersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetConfig().GetGeneration(), resp.GetConfig().GetLastReloadError()
	}
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// A writer that stopped after "excludedTools:" left valid YAML: refused, the rule kept.
	write("mcpServers:\n  notes:\n    url: http://127.0.0.1:1/mcp\n    excludedTools:\n")
	if err := r.reload(false); err == nil || !strings.Contains(err.Error(), "excludedTools: has no value") {
		t.Errorf("half-written rule: reload = %v, want it refused", err)
	}
	if gen, msg := state(); gen != 1 || !strings.Contains(msg, "excludedTools: has no value") {
		t.Errorf("half-written rule: generation %d, reported %q; want the config in use kept and the reason", gen, msg)
	}

	// A file that changes between the two reads is not applied: it is read again later.
	write(whole + "  more:\n    url: http://127.0.0.1:2/mcp\n")
	r.settle = func() { write(whole + "  more:\n    url: http://127.0.0.1:2/mcp\n    excludedTools: []\n") }
	if err := r.reload(false); !errors.Is(err, errUnsettled) {
		t.Errorf("a file still being written: reload = %v, want errUnsettled", err)
	}
	if gen, _ := state(); gen != 1 {
		t.Errorf("a file still being written was applied (generation %d)", gen)
	}
	r.settle = func() {}
	if err := r.reload(false); err != nil {
		t.Errorf("the same file once settled: %v", err)
	}
	if gen, msg := state(); gen != 2 || msg != "" {
		t.Errorf("settled: generation %d, error %q; want it applied", gen, msg)
	}

	// A FIFO in the file's place is refused at once instead of blocking the reloader.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.reload(true) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("FIFO: reload = %v", err)
		}
	case <-time.After(5 * time.Second):
		f, _ := os.OpenFile(path, os.O_WRONLY, 0) // unblock the reader so the test can end
		f.Close()
		t.Fatal("a FIFO in the config's place blocks the reloader")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}

	// A symlink to a file that is not a config: the readiness answer does not quote it.
	secret := filepath.Join(dir, "shadow")
	if err := os.WriteFile(secret, []byte("root:x:0:0:TOPSECRETHASH:/root:/bin/bash\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, path); err != nil {
		t.Fatal(err)
	}
	if err := r.reload(true); err == nil {
		t.Error("a symlink to another file was applied")
	}
	if _, msg := state(); msg == "" || strings.Contains(msg, "TOPSECRET") || strings.Contains(msg, "root:x") {
		t.Errorf("the reported reason %q quotes the file, or says nothing", msg)
	}
}

// reconfigurableDouble is a double of a reconfigurable service that records what it is given
// and refuses when told to.
type reconfigurableDouble struct {
	refuse   error
	reloads  int
	refusals []string
}

func (d *reconfigurableDouble) ReloadServers(map[string]mcpconfig.Server) error {
	if d.refuse != nil {
		return d.refuse
	}
	d.reloads++
	return nil
}

// reporterDouble is a reconfigurableDouble that reports refusals, as the executor does.
type reporterDouble struct{ reconfigurableDouble }

func (d *reporterDouble) RefuseConfig(err error) { d.refusals = append(d.refusals, err.Error()) }

// TestReloadTargets: a reload reaches the reconfigurable services in their order; the first
// one's refusal keeps the others from applying it; a file that does not parse is refused
// before any service is asked, and reported by those that report refusals.
func TestReloadTargets(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolmesh.yaml")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("mcpServers:\n  a: {url: http://127.0.0.1:1/mcp}\n")
	first, second := &reporterDouble{}, &reconfigurableDouble{}
	r := newReloader(Config{ConfigFile: path}, nil, []reloadTarget{{"executor", first}, {"api", second}}, slog.New(slog.DiscardHandler))
	r.settle = func() {}

	if err := r.reload(true); err != nil || first.reloads != 1 || second.reloads != 1 {
		t.Errorf("reload = %v; reloads %d, %d; want both services given the servers", err, first.reloads, second.reloads)
	}

	first.refuse = errors.New("executor config: a: url: required")
	if err := r.reload(true); err == nil || second.reloads != 1 {
		t.Errorf("the first service refusing: reload = %v, the second reloaded %d times; want an error and the second left as it was", err, second.reloads)
	}
	first.refuse = nil

	write("mcpServers:\n  a: {url: http://127.0.0.1:1/mcp\n")
	if err := r.reload(true); err == nil || first.reloads != 1 || second.reloads != 1 {
		t.Errorf("a file that does not parse: reload = %v; reloads %d, %d; want an error and no service asked", err, first.reloads, second.reloads)
	}
	if len(first.refusals) != 1 || !strings.Contains(first.refusals[0], "toolmesh.yaml") {
		t.Errorf("refusals reported %q, want the parse error, once", first.refusals)
	}
}
