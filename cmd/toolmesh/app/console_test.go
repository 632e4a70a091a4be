package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cdptarget "github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolmesh/toolmesh/internal/eventually"
	"github.com/toolmesh/toolmesh/internal/telemetry/jaegertest"
	"github.com/toolmesh/toolmesh/internal/testbackend"
)

// The web console (services/api/ui) in real headless Chromium against every target in one
// process and the llama-server double. scripts/chromium installs Debian's chromium and
// exports TOOLMESH_CHROMIUM; without it these tests skip (TOOLMESH_CHROMIUM_REQUIRED=1 fails
// them instead). Each test saves screenshots in its t.ArtifactDir(): run with
// `-artifacts -outputdir DIR` to keep them.

// firstLoadBudget is the most the console's first load may transfer (issue 9).
const firstLoadBudget = 200 << 10

// startBrowser starts one headless Chromium for the test, or skips the test saying why.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	path := testbackend.Chromium.Need(t)[0]
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(path),
		// Tests run as root in CI, where Chromium's sandbox refuses to start; the pages are ours.
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
		// The machine has no network but loopback: no update checks, no QUIC probes.
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-quic", true),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Do(browser); err != nil {
		t.Fatalf("start chromium (%s): %v", path, err)
	}
	return browser
}

// page is one tab in a browser context of its own: an empty cache and sessionStorage, as a
// first visit has.
type page struct {
	t      *testing.T
	ctx    context.Context
	cancel func()

	mu       sync.Mutex
	problems []string // uncaught exceptions and Content-Security-Policy violations
	shots    int
}

func openPage(t *testing.T, browser context.Context, url string) *page {
	t.Helper()
	tab, cancelTab := chromedp.NewContext(browser, chromedp.WithNewBrowserContext())
	ctx, cancelTimeout := context.WithTimeout(tab, 90*time.Second)
	p := &page{t: t, ctx: ctx}
	var once sync.Once
	p.cancel = func() { once.Do(func() { cancelTimeout(); cancelTab() }) }
	t.Cleanup(p.cancel)
	console := chromedp.Console(ctx)
	go func() {
		for m, err := range console {
			if err != nil {
				return
			}
			if m.IsException() || strings.Contains(m.Text, "Content Security Policy") {
				p.mu.Lock()
				p.problems = append(p.problems, m.String())
				p.mu.Unlock()
			}
		}
	}()
	p.do(chromedp.Navigate(url))
	t.Cleanup(p.checkConsole)
	return p
}

func (p *page) close() {
	p.checkConsole()
	p.cancel()
}

func (p *page) checkConsole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.problems {
		p.t.Errorf("browser console: %s", m)
	}
	p.problems = nil
}

func (p *page) do(actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, actions...); err != nil {
		p.screenshot("failed")
		p.t.Fatal(err)
	}
}

// wait polls a JavaScript condition until it holds.
func (p *page) wait(what, cond string) {
	p.t.Helper()
	if _, err := chromedp.Run(p.ctx, chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		p.screenshot("failed")
		p.t.Fatalf("waiting for %s (%s): %v\nthe page shows:\n%s", what, cond, err, p.text())
	}
}

// text is what the page shows (its first 4 KB), for a failure's message: the screenshot is
// gone with the test's temporary folder.
func (p *page) text() string {
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText.slice(0, 4096)`))
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	return s
}

// doWithin is do with a time bound of its own: a click waits for the page's handlers.
func (p *page) doWithin(d time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, d)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.screenshot("failed")
		p.t.Fatalf("within %s: %v", d, err)
	}
}

// waitWithin is wait with a time bound of its own, for a page that might hang: a hung tab
// answers no DevTools call, so only the context's end stops the wait.
func (p *page) waitWithin(d time.Duration, what, cond string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, d)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingTimeout(d))); err != nil {
		p.screenshot("failed")
		p.t.Fatalf("waiting at most %s for %s (%s): %v", d, what, cond, err)
	}
}

// eval returns a JavaScript expression's value.
func eval[T any](p *page, expr string) T {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// screenshot saves the whole page as a PNG in the test's artifact folder.
func (p *page) screenshot(name string) {
	p.t.Helper()
	// Bounded: a hung tab answers nothing.
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Logf("screenshot %s: %v", name, err)
		return
	}
	p.shots++
	file := filepath.Join(p.t.ArtifactDir(), fmt.Sprintf("%02d-%s.png", p.shots, name))
	if err := os.WriteFile(file, png, 0o644); err != nil {
		p.t.Errorf("save screenshot: %v", err)
		return
	}
	p.t.Logf("screenshot: %s", file)
}

// unlabelledJS lists the visible form controls without an accessible name: every input needs
// a label and every button a text.
const unlabelledJS = `[...document.querySelectorAll('input, select, textarea, button')]
  .filter(e => !e.closest('[hidden], dialog:not([open])'))
  .filter(e => e.tagName === 'BUTTON'
    ? !e.textContent.trim() && !e.getAttribute('aria-label')
    : e.labels.length === 0 && !e.getAttribute('aria-label') && !e.getAttribute('aria-labelledby'))
  .map(e => e.id || e.outerHTML.slice(0, 80))`

// checkAccessible checks the page's landmarks and that every visible control is labelled.
func (p *page) checkAccessible() {
	p.t.Helper()
	if got := eval[[]string](p, unlabelledJS); len(got) > 0 {
		p.t.Errorf("controls without a label: %v", got)
	}
	landmarks := eval[[]string](p, `['header', 'nav[aria-label]', 'main', 'h1'].filter(s => !document.querySelector(s))`)
	if len(landmarks) > 0 {
		p.t.Errorf("missing landmarks: %v", landmarks)
	}
}

// loadStats is what the browser's Performance API says about the first load.
type loadStats struct {
	Requests     int     `json:"requests"`
	Transfer     float64 `json:"transfer"` // bytes on the wire, headers included
	Encoded      float64 `json:"encoded"`  // response bodies as sent
	ServersShown float64 `json:"servers"`  // ms from navigation to the servers table on screen
	// Where that time went, in ms from navigation: the page's HTML fully received, the
	// script run (DOMContentLoaded), and GET /v1/servers sent and answered.
	HTML        float64 `json:"html"`
	Ready       float64 `json:"ready"`
	FetchStart  float64 `json:"fetch_start"`
	FetchAnswer float64 `json:"fetch_answer"`
}

const loadStatsJS = `(() => {
  const all = [...performance.getEntriesByType('navigation'), ...performance.getEntriesByType('resource')];
  const mark = performance.getEntriesByName('toolmesh:servers-rendered')[0];
  const nav = all[0];
  const servers = all.find(e => e.name.endsWith('/v1/servers')) || { startTime: -1, responseEnd: -1 };
  return {
    html: nav.responseEnd,
    ready: nav.domContentLoadedEventEnd,
    fetch_start: servers.startTime,
    fetch_answer: servers.responseEnd,
    requests: all.length,
    transfer: all.reduce((n, e) => n + e.transferSize, 0),
    encoded: all.reduce((n, e) => n + e.encodedBodySize, 0),
    servers: mark ? mark.startTime : -1,
  };
})()`

func TestConsole(t *testing.T) {
	browser := startBrowser(t)
	const jaeger = "http://jaeger.invalid:16686"
	m := startMesh(t, "--api.jaeger-url="+jaeger+"/")
	m.model.set("What is 2 plus 3?", addTwoAndThree)
	m.model.set("Take your time with 2 plus 3.", func(string, int, bool) string { return "HANG" })
	ui := m.base + "/ui/"

	t.Run("servers page lists the demo servers, light and fast", func(t *testing.T) {
		var shown []float64
		for i := range 5 {
			p := openPage(t, browser, ui)
			p.wait("three servers listed", `document.querySelectorAll('#servers-table tbody tr').length === 3`)
			p.wait("the frame with them drawn", `performance.getEntriesByName('toolmesh:servers-rendered').length > 0`)
			names := eval[[]string](p, `[...document.querySelectorAll('#servers-table tbody tr')].map(r => r.dataset.server)`)
			if want := []string{"calculator", "converter", "sqlite"}; !slices.Equal(names, want) {
				t.Errorf("servers listed: %v, want %v", names, want)
			}
			rows := eval[[]string](p, `[...document.querySelectorAll('#servers-table tbody tr')].map(r => [...r.cells].map(c => c.textContent.trim()).join(' | '))`)
			for _, r := range rows {
				// name version | health | transport | endpoint | protocol | tools | connected | last error
				if !regexp.MustCompile(`^\w+ 0\.1\.0 \| ready \| SSE \| http://127\.0\.0\.1:\d+/sse \| \d{4}-\d\d-\d\d \| [1-9]\d* \| .+ \| —$`).MatchString(r) {
					t.Errorf("server row %q: want name, ready, SSE, endpoint, protocol version, tool count, connected, no error", r)
				}
			}
			load := eval[loadStats](p, loadStatsJS)
			if load.Transfer >= firstLoadBudget || load.Transfer <= 0 {
				t.Errorf("first load transferred %.0f bytes in %d requests; the budget is %d", load.Transfer, load.Requests, firstLoadBudget)
			}
			if load.ServersShown <= 0 {
				t.Errorf("no toolmesh:servers-rendered mark")
			}
			shown = append(shown, load.ServersShown)
			t.Logf("load %d: HTML in %.0f ms, script run at %.0f ms, GET /v1/servers %.0f-%.0f ms, servers on screen at %.0f ms",
				i+1, load.HTML, load.Ready, load.FetchStart, load.FetchAnswer, load.ServersShown)
			if i == 0 {
				t.Logf("first load: %d requests, %.1f KB transferred (%.1f KB of bodies); servers on screen %.0f ms after navigation",
					load.Requests, load.Transfer/1024, load.Encoded/1024, load.ServersShown)
				p.wait("the mesh's state", `!!document.querySelector('#mesh [data-part="model"]')`)
				if got, want := eval[string](p, meshTextJS), "3 of 3 servers ready · 11 tools indexed · model ready gorilla-openfunctions-v2"; got != want {
					t.Errorf("mesh state: %q, want %q", got, want)
				}
				docs := eval[string](p, `document.getElementById('api-docs').href`)
				if docs != m.base+"/openapi.json" {
					t.Errorf("API reference link %q, want %s/openapi.json", docs, m.base)
				}
				if code, b := get(t, docs); code != http.StatusOK || !strings.Contains(string(b), `"swagger"`) {
					t.Errorf("GET %s: %d %.100s", docs, code, b)
				}
				// The MCP endpoints of this mesh and client configs to copy.
				p.wait("the MCP endpoints", `document.querySelectorAll('#mcp-endpoints li').length === 6`)
				endpoints := eval[[]string](p, `[...document.querySelectorAll('#mcp-endpoints li code')].map(c => c.textContent)`)
				if want := []string{m.base + "/mcp", m.base + "/mcp/search", m.base + "/mcp/servers/calculator", m.base + "/mcp/servers/converter",
					m.base + "/mcp/servers/sqlite", m.base + "/sse"}; !slices.Equal(endpoints, want) {
					t.Errorf("MCP endpoints shown: %v, want %v", endpoints, want)
				}
				var vscode struct {
					Servers map[string]struct{ Type, URL string }
				}
				if err := json.Unmarshal([]byte(eval[string](p, `document.getElementById('mcp-vscode').textContent`)), &vscode); err != nil ||
					vscode.Servers["toolmesh"].URL != m.base+"/mcp" || vscode.Servers["toolmesh"].Type != "http" {
					t.Errorf("VS Code config: %+v (%v); want toolmesh at %s/mcp over http", vscode, err, m.base)
				}
				var claude struct {
					MCPServers map[string]struct {
						Command string
						Args    []string
						Env     map[string]string
					} `json:"mcpServers"`
				}
				if err := json.Unmarshal([]byte(eval[string](p, `document.getElementById('mcp-claude').textContent`)), &claude); err != nil ||
					claude.MCPServers["toolmesh"].Command != "toolmesh" || !slices.Equal(claude.MCPServers["toolmesh"].Args, []string{"connect"}) ||
					claude.MCPServers["toolmesh"].Env["TOOLMESH_API"] != m.base {
					t.Errorf("Claude Desktop config: %+v (%v); want toolmesh connect with TOOLMESH_API %s", claude, err, m.base)
				}
				p.do(chromedp.Click(chromedp.CSS(`button[data-copy="mcp-vscode"]`)))
				p.wait("the copy button's answer", `['Copied', 'Selected: press Ctrl-C'].includes(document.querySelector('button[data-copy="mcp-vscode"]').textContent)`)
				p.checkAccessible()
				p.screenshot("servers")
			}
			p.close()
		}
		slices.Sort(shown)
		// Reported, not asserted: timings on a shared CI machine are not a test (the goal is 300 ms).
		t.Logf("servers on screen after navigation, 5 first loads: min %.0f ms, median %.0f ms, max %.0f ms",
			shown[0], shown[len(shown)/2], shown[len(shown)-1])
	})

	t.Run("a browser opening the api's root lands on the console, with the mesh's state on every page", func(t *testing.T) {
		p := openPage(t, browser, m.base+"/")
		p.wait("the console's servers page", `location.pathname === '/ui/' && document.querySelectorAll('#servers-table tbody tr').length === 3`)
		for _, view := range []string{"servers", "tools", "playground"} {
			p.do(chromedp.Evaluate[chromedp.Void](`location.hash = '#/` + view + `'`))
			p.wait("the "+view+" view", `!document.getElementById('page-`+view+`').hidden`)
			p.wait("the mesh's state on "+view, `document.getElementById('mesh').textContent.includes('model ready')`)
			if visible := eval[bool](p, `(r => r.height > 0 && r.top >= 0)(document.getElementById('mesh').getBoundingClientRect())`); !visible {
				t.Errorf("the mesh's state is not on screen on %s", view)
			}
		}
		p.screenshot("root-redirect-playground")
		// JSON clients keep the 404.
		req, _ := http.NewRequest(http.MethodGet, m.base+"/", nil)
		req.Header.Set("Accept", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), "no route for GET /") {
			t.Errorf("GET / as JSON: %d %s, want 404 no route", resp.StatusCode, b)
		}
	})

	t.Run("search for celsius ranks the converter first", func(t *testing.T) {
		p := openPage(t, browser, ui+"#/tools")
		p.wait("the catalog", `document.querySelectorAll('#tools-list li').length === 11`)
		p.do(chromedp.SendKeys(chromedp.ID("search-q"), "celsius"+kb.Enter))
		p.wait("search results", `document.getElementById('tools-summary').textContent.includes('celsius')`)
		results := eval[[]string](p, `[...document.querySelectorAll('#tools-list li')].map(li => li.dataset.toolId + ' ' + li.querySelector('.score').textContent)`)
		if len(results) == 0 || !regexp.MustCompile(`^converter\.\w+ score \d+\.\d\d$`).MatchString(results[0]) {
			t.Errorf("results for celsius: %q; want a converter tool first, with its score", results)
		}
		p.checkAccessible()
		p.screenshot("search-celsius")
	})

	t.Run("the calculator.add form rejects a missing field and returns 5", func(t *testing.T) {
		p := openPage(t, browser, ui+"#/tools/calculator.add")
		p.wait("the call form", `!!document.querySelector('#call-form [data-field="b"] input')`)
		required := eval[[]string](p, `[...document.querySelectorAll('#call-form input[required]')].map(i => i.name + ':' + i.type + ':' + i.labels[0].textContent)`)
		if want := []string{"a:number:a* (required)number", "b:number:b* (required)number"}; !slices.Equal(required, want) {
			t.Errorf("required inputs: %q, want %q", required, want)
		}
		p.do(chromedp.SendKeys(chromedp.CSS(`#call-form [data-field="a"] input`), "2"),
			chromedp.Click(chromedp.CSS(`#call-form button[type="submit"]`)))
		p.wait("the form's complaint", `!document.getElementById('call-form-error').hidden`)
		got := eval[string](p, `document.getElementById('call-form-error').textContent + ' / ' +
			document.querySelector('[data-field="b"] .field-error').textContent + ' / ' +
			document.activeElement.name + ' invalid=' + document.activeElement.getAttribute('aria-invalid')`)
		if want := "Not sent: b is required. / b is required. / b invalid=true"; got != want {
			t.Errorf("after submitting without b: %q, want %q", got, want)
		}
		if n := eval[int](p, `performance.getEntriesByType('resource').filter(e => e.name.includes(':call')).length`); n != 0 {
			t.Errorf("the form sent %d calls with a field missing", n)
		}
		p.screenshot("add-missing-b")
		p.do(chromedp.SendKeys(chromedp.CSS(`#call-form [data-field="b"] input`), "3"),
			chromedp.Click(chromedp.CSS(`#call-form button[type="submit"]`)))
		p.wait("the result", `!!document.querySelector('#call-result .content-text')`)
		result := eval[string](p, `document.querySelector('#call-result .content-text').textContent + ' ' + document.querySelector('#call-result .badge').textContent`)
		if result != "5 ok" {
			t.Errorf("calculator.add 2 3 shows %q, want 5 ok", result)
		}
		if n := eval[bool](p, `document.getElementById('call-form-error').hidden && !document.querySelector('[aria-invalid]')`); !n {
			t.Errorf("the form still shows an error after a good call")
		}
		p.checkAccessible()
		p.screenshot("add-result")
	})

	t.Run("the form enforces each schema type before sending", func(t *testing.T) {
		p := openPage(t, browser, ui+"#/tools")
		p.wait("the catalog", `document.querySelectorAll('#tools-list li').length === 11`)
		// No demo tool has every kind of field, so the page is shown one of its own making; its
		// calls are caught before they leave (window.sent) and answered "ok".
		p.do(chromedp.Evaluate[chromedp.Void](`
			toolsView.byID.set('kinds.every', {id: 'kinds.every', server: 'kinds', name: 'every', description: 'Every kind of field.',
			  input_schema: {type: 'object', required: ['count', 'flag', 'unit', 'items', 'options', 'name'], properties: {
			    count: {type: 'integer', minimum: 1}, ratio: {type: 'number', maximum: 1}, flag: {type: 'boolean'},
			    unit: {enum: ['C', 'F']}, items: {type: 'array'}, options: {type: 'object'},
			    name: {type: 'string', minLength: 2}, anything: {}}}});
			window.sent = null;
			const realFetch = window.fetch;
			window.fetch = (url, init) => {
			  if (!String(url).endsWith('/v1/tools/kinds/every:call')) return realFetch(url, init);
			  window.sent = init.body;
			  return Promise.resolve(new Response('{"content":[{"type":"text","text":"ok"}],"is_error":false,"duration_ms":1}'));
			};
			location.hash = '#/tools/kinds.every';`))
		p.wait("the form", `!!document.querySelector('#call-form [data-field="anything"]')`)
		controls := eval[[]string](p, `[...document.querySelectorAll('#call-form [data-field]')].map(d => {
			const c = d.querySelector('input, select, textarea');
			return [d.dataset.field, c.tagName.toLowerCase() + (c.type && c.tagName === 'INPUT' ? '/' + c.type : ''), c.required ? 'required' : 'optional'].join(' ');
		})`)
		want := []string{"count input/number required", "flag select required", "unit select required", "items textarea required",
			"options textarea required", "name input/text required", "ratio input/number optional", "anything textarea optional"}
		if !slices.Equal(controls, want) {
			t.Errorf("controls:\n%s\nwant\n%s", strings.Join(controls, "\n"), strings.Join(want, "\n"))
		}
		field := func(name string) chromedp.CSS {
			return chromedp.CSS(`#call-form [data-field="` + name + `"] :is(input, select, textarea)`)
		}
		p.do(chromedp.SendKeys(field("count"), "2.5"), chromedp.SendKeys(field("ratio"), "3"), chromedp.SetValue(field("flag"), "false"),
			chromedp.SendKeys(field("items"), "{"), chromedp.SendKeys(field("options"), "[1]"), chromedp.SendKeys(field("name"), "x"),
			chromedp.Click(chromedp.CSS(`#call-form button[type="submit"]`)))
		p.wait("the form's complaints", `!document.getElementById('call-form-error').hidden`)
		errs := eval[[]string](p, `[...document.querySelectorAll('#call-form .field-error:not([hidden])')].map(e => e.textContent)`)
		wantErrs := []string{"count must be a whole number.", "unit is required.", "items is not valid JSON: ",
			`options must be a JSON object, like {"key": "value"}.`, "name must be at least 2 characters.", "ratio must be at most 1."}
		if len(errs) != len(wantErrs) {
			t.Errorf("field errors: %q, want %q", errs, wantErrs)
		} else {
			for i := range errs {
				if !strings.HasPrefix(errs[i], wantErrs[i]) {
					t.Errorf("field error %d: %q, want %q", i, errs[i], wantErrs[i])
				}
			}
		}
		if sent := eval[any](p, `window.sent`); sent != nil {
			t.Errorf("the form sent %v with bad fields", sent)
		}
		p.screenshot("types-refused")
		p.do(chromedp.SetValue(field("count"), "3"), chromedp.SetValue(field("ratio"), "0.5"), chromedp.SetValue(field("unit"), "1"),
			chromedp.SetValue(field("items"), "[1, 2]"), chromedp.SetValue(field("options"), `{"a": 1}`), chromedp.SetValue(field("name"), "ok"),
			chromedp.SetValue(field("anything"), "null"), chromedp.Click(chromedp.CSS(`#call-form button[type="submit"]`)))
		p.wait("the call", `window.sent !== null && !!document.querySelector('#call-result .content-text')`)
		sent := eval[string](p, `window.sent`)
		if want := `{"arguments":{"count":3,"flag":false,"unit":"F","items":[1,2],"options":{"a":1},"name":"ok","ratio":0.5,"anything":null}}`; sent != want {
			t.Errorf("sent %s\nwant %s", sent, want)
		}
		p.checkAccessible()
	})

	t.Run("playground shows the retrieval, the call and the answer in order", func(t *testing.T) {
		p := openPage(t, browser, ui+"#/playground")
		p.do(chromedp.SendKeys(chromedp.ID("question"), "What is 2 plus 3?"), chromedp.Click(chromedp.ID("ask")))
		p.wait("the query to finish", `!!document.querySelector('.turn .timeline > li[data-kind="done"]')`)
		kinds := eval[[]string](p, `[...document.querySelectorAll('.turn .timeline > li')].map(li => li.dataset.kind)`)
		if want := []string{"retrieved", "model_output", "call", "retrieved", "model_output", "done"}; !slices.Equal(kinds, want) {
			t.Errorf("timeline: %v, want %v", kinds, want)
		}
		retrieved := eval[string](p, `document.querySelector('.turn .timeline > li[data-kind="retrieved"]').textContent`)
		if !regexp.MustCompile(`calculator\.add score \d+\.\d\d`).MatchString(retrieved) {
			t.Errorf("step 1 retrieved: %q; want calculator.add with its score", retrieved)
		}
		if out := eval[string](p, `document.querySelector('.turn .model-output').textContent`); out != "<<function>>calculator.add(a=2, b=3)" {
			t.Errorf("model output: %q", out)
		}
		call := eval[string](p, `(li => li.querySelector('h3').textContent + ' | ' + JSON.stringify(JSON.parse(li.querySelector('.call-args').textContent)) +
			' | ' + li.querySelector('.call-status').textContent + ' | ' + li.querySelector('.call-output').textContent)(document.querySelector('.turn .timeline > li[data-kind="call"]'))`)
		if !regexp.MustCompile(`^Step 1: call calculator\.add \| \{"a":2,"b":3\} \| done in \d+\.\d{1,2} m?s \| 5$`).MatchString(call) {
			t.Errorf("call: %q; want the tool, its arguments, its duration and its result", call)
		}
		if answer := eval[string](p, `document.querySelector('.turn .reply .answer-text').textContent`); answer != "2 plus 3 is 5." {
			t.Errorf("answer: %q", answer)
		}
		link := eval[string](p, `document.querySelector('.turn .timeline > li[data-kind="done"] a.trace-link').href`)
		if !regexp.MustCompile(`^` + regexp.QuoteMeta(jaeger) + `/trace/[0-9a-f]{32}$`).MatchString(link) {
			t.Errorf("trace link %q, want %s/trace/TRACE_ID", link, jaeger)
		}
		checkWaterfall(t, p, lastTurn, []string{"retrieval Step 1: retrieval", "model Step 1: model", "call Step 1: calculator.add",
			"retrieval Step 2: retrieval", "model Step 2: model", "compose Composing the answer"})
		callTook := eval[string](p, `document.querySelector('.waterfall tr[data-kind="call"] td:nth-of-type(2)').textContent`)
		if status := eval[string](p, `document.querySelector('.turn .call-status').textContent`); status != "done in "+callTook {
			t.Errorf("the waterfall says the call took %q, the timeline %q", callTook, status)
		}
		p.checkAccessible()
		p.screenshot("playground-answer")
		p.do(chromedp.ScrollIntoView(chromedp.CSS(`.waterfall`)))
		p.screenshot("playground-waterfall")
	})

	t.Run("the query response times each part in order", func(t *testing.T) {
		code, b := post(t, m.base+"/v1/query", `{"query":"What is 2 plus 3?"}`)
		var r timedResponse
		if err := json.Unmarshal(b, &r); code != http.StatusOK || err != nil {
			t.Fatalf("POST /v1/query: %d %s (%v)", code, b, err)
		}
		if len(r.Steps) != 2 || len(r.ToolCalls) != 1 {
			t.Fatalf("%d steps and %d calls, want 2 and 1: %s", len(r.Steps), len(r.ToolCalls), b)
		}
		// Each part starts after the one before it ends, and all end within the query.
		s1, s2, c := r.Steps[0], r.Steps[1], r.ToolCalls[0]
		parts := []struct {
			name        string
			start, took float64
		}{
			{"step 1 retrieval", s1.RetrievalStartMs, s1.RetrievalMs},
			{"step 1 model", s1.ModelStartMs, s1.ModelMs},
			{"the call", c.StartMs, c.DurationMs},
			{"step 2 retrieval", s2.RetrievalStartMs, s2.RetrievalMs},
			{"step 2 model", s2.ModelStartMs, s2.ModelMs},
			{"composing", r.ComposeStartMs, r.ComposeMs},
			{"the query's end", r.DurationMs, 0},
		}
		for i, part := range parts {
			if part.took <= 0 && i < len(parts)-1 || part.start < 0 {
				t.Errorf("%s: start %.3f ms, took %.3f ms; want a start and a duration", part.name, part.start, part.took)
			}
			if i > 0 && part.start < parts[i-1].start+parts[i-1].took {
				t.Errorf("%s starts at %.3f ms, before %s ends (%.3f + %.3f ms)", part.name, part.start, parts[i-1].name, parts[i-1].start, parts[i-1].took)
			}
		}
	})

	t.Run("stop cancels a slow query", func(t *testing.T) {
		before := m.double.Canceled()
		p := openPage(t, browser, ui+"#/playground")
		p.do(chromedp.SendKeys(chromedp.ID("question"), "Take your time with 2 plus 3."), chromedp.Click(chromedp.ID("ask")))
		p.wait("the retrieval before the model answers", `!!document.querySelector('.turn .timeline > li[data-kind="retrieved"]')`)
		eventually.True(t, 5*time.Second, "the model request to start", func() bool { return m.double.Processing() > 0 })
		p.screenshot("playground-waiting")
		p.do(chromedp.Click(chromedp.ID("stop")))
		eventually.True(t, 5*time.Second, "the model request to be canceled after stop", func() bool { return m.double.Canceled() > before })
		p.wait("the stopped note", `!!document.querySelector('.turn[data-state="stopped"] .reply .outcome[data-kind="stopped"]')`)
		if ok := eval[bool](p, `!document.getElementById('ask').disabled && document.getElementById('stop').disabled`); !ok {
			t.Errorf("after stop: want Ask enabled and Stop disabled")
		}
		// The stopped question is back in the box, to ask again.
		if q := eval[string](p, `document.getElementById('question').value`); q != "Take your time with 2 plus 3." {
			t.Errorf("after stop the question box holds %q", q)
		}
		p.screenshot("playground-stopped")
	})

	t.Run("keyboard alone: skip link, navigation, Ctrl+Enter asks", func(t *testing.T) {
		p := openPage(t, browser, ui)
		p.wait("servers", `document.querySelectorAll('#servers-table tbody tr').length === 3`)
		p.do(chromedp.KeyEvent(kb.Tab))
		if id := eval[string](p, `document.activeElement.id`); id != "skip" {
			t.Errorf("first Tab focuses %q, want the skip link", id)
		}
		p.do(chromedp.KeyEvent(kb.Enter))
		if id := eval[string](p, `document.activeElement.id`); id != "main" {
			t.Errorf("the skip link moved focus to %q, want main", id)
		}
		// Tab on to the navigation's third link (Playground) and follow it.
		p.do(chromedp.Focus(chromedp.CSS(`a[data-route="servers"]`)), chromedp.KeyEvent(kb.Tab+kb.Tab+kb.Enter))
		p.wait("the playground", `location.hash === '#/playground' && document.activeElement.id === 'playground-title'`)
		p.do(chromedp.KeyEvent(kb.Tab))
		if id := eval[string](p, `document.activeElement.id`); id != "question" {
			t.Errorf("Tab after the playground's heading focuses %q, want the question", id)
		}
		p.do(chromedp.KeyEvent(`@calculator.add({"a":2,"b":3})`),
			chromedp.KeyEvent(kb.Enter, chromedp.KeyModifiers(chromedp.ModifierCtrl)))
		p.wait("the direct call's answer", `document.querySelector('.turn .answer-text')?.textContent === '5'`)
		if visible := eval[bool](p, `(() => { document.getElementById('ask').focus(); const s = getComputedStyle(document.activeElement); return s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2; })()`); !visible {
			t.Errorf("a focused button shows no focus outline")
		}
		p.screenshot("keyboard-direct-call")
	})
}

// lastTurn is the playground's newest turn, as a CSS selector.
const lastTurn = "#conversation > li:last-child"

// turnN is the playground's nth turn (from 1), as a CSS selector.
func turnN(n int) string { return fmt.Sprintf("#conversation > li:nth-child(%d)", n) }

// TestConsoleChat holds a conversation in the playground: a system message, three questions
// each answered with a tool and in the context of the earlier ones (the prompts at the
// llama-server double show them), a turn that fails part way and one the api refuses (shown,
// and not sent as context), New chat, and a conversation too long for the model's context.
func TestConsoleChat(t *testing.T) {
	browser := startBrowser(t)
	m := startMesh(t)
	var mu sync.Mutex
	prompts := map[string][]string{} // the prompts of each question's first model turn
	record := func(q string, s script) {
		m.model.set(q, func(p string, calls int, compose bool) string {
			if calls == 0 && !compose {
				mu.Lock()
				prompts[q] = append(prompts[q], p)
				mu.Unlock()
			}
			return s(p, calls, compose)
		})
	}
	promptOf := func(q string) string {
		mu.Lock()
		defer mu.Unlock()
		if len(prompts[q]) == 0 {
			t.Fatalf("the model was never asked %q", q)
		}
		return prompts[q][len(prompts[q])-1]
	}
	// oneCall scripts a question answered with one call and an answer composed from its result.
	oneCall := func(call, answer string) script {
		return func(p string, calls int, compose bool) string {
			switch {
			case compose:
				return answer + " " + outputOf(p) + "."
			case calls == 0:
				return "<<function>>" + call
			}
			return "The result is " + outputOf(p)
		}
	}
	record("What is 2 plus 3?", addTwoAndThree)
	record("Now multiply it by 2.", oneCall("calculator.multiply(a=5, b=2)", "Doubled, that is"))
	record("Subtract 1 from that.", oneCall("calculator.subtract(a=10, b=1)", "Minus 1, that is"))
	// The answer breaks off part way: the turn fails with the calls it made and half an answer.
	record("Add 2 and 3, please.", oneCall("calculator.add(a=2, b=3)", "BREAK:The sum of 2 and 3 is"))

	p := openPage(t, browser, m.base+"/ui/#/playground")
	p.wait("the playground", `!document.getElementById('page-playground').hidden`)
	if ok := eval[bool](p, `document.getElementById('conversation').hidden && !document.getElementById('chat-empty').hidden && document.getElementById('new-chat').disabled`); !ok {
		t.Errorf("a new playground: want no conversation shown, the introduction, New chat disabled")
	}
	const system = "Answer in one short sentence."
	p.do(chromedp.Click(chromedp.CSS(`#ask-options summary`)), chromedp.SendKeys(chromedp.ID("system-message"), system))

	ask := func(q string, want int) {
		t.Helper()
		p.do(chromedp.SetValue(chromedp.ID("question"), q), chromedp.Click(chromedp.ID("ask")))
		p.wait(fmt.Sprintf("turn %d to end", want), fmt.Sprintf(`document.querySelectorAll('#conversation > li').length === %d &&
			document.querySelector('%s').dataset.state !== 'running' && !document.getElementById('ask').disabled`, want, lastTurn))
	}
	text := func(sel string) string {
		t.Helper()
		return eval[string](p, `(e => e ? e.textContent : '(none)')(document.querySelector('`+sel+`'))`)
	}
	turnState := func(n int) string { return eval[string](p, `document.querySelector('`+turnN(n)+`').dataset.state`) }
	// answered asks q as turn n, checks its answer and returns the prompt of its first model turn.
	answered := func(q string, n int, answer string) string {
		t.Helper()
		ask(q, n)
		if got := text(turnN(n) + " .answer-text"); got != answer || turnState(n) != "answered" {
			t.Fatalf("turn %d: %q (%s), want %q", n, got, turnState(n), answer)
		}
		return promptOf(q)
	}
	callsOf := func(n int) []string {
		return eval[[]string](p, `[...document.querySelectorAll('`+turnN(n)+` .timeline > li[data-kind="call"] h3')].map(h => h.textContent)`)
	}

	// Turn 1: the system message goes first, and there is no earlier turn.
	p1 := answered("What is 2 plus 3?", 1, "2 plus 3 is 5.")
	if !strings.Contains(p1, "<<system>>'"+system+"'\n<<question>>What is 2 plus 3?") || strings.Contains(p1, "<<user>>") {
		t.Errorf("turn 1's prompt: want the system message and no earlier turn:\n%s", p1)
	}
	if q := eval[string](p, `document.getElementById('question').value`); q != "" {
		t.Errorf("after an answer the question box holds %q, want it empty", q)
	}

	// Turn 2 is asked with turn 1 before it; turn 1's steps fold away.
	p2 := answered("Now multiply it by 2.", 2, "Doubled, that is 10.")
	if want := "<<system>>'" + system + "'\n<<user>>'What is 2 plus 3?'\n<<assistant>>'2 plus 3 is 5.'\n<<question>>Now multiply it by 2."; !strings.Contains(p2, want) {
		t.Errorf("turn 2's prompt: want\n%s\nin\n%s", want, p2)
	}
	if got := text(turnN(2) + ` .timeline > li[data-kind="model_output"] .step-history`); got != "1 earlier turn given, all whole." {
		t.Errorf("turn 2's first step says %q about the earlier turns", got)
	}
	if open := eval[[]bool](p, `[...document.querySelectorAll('#conversation .turn-steps')].map(d => d.open)`); !slices.Equal(open, []bool{false, true}) {
		t.Errorf("turns' steps open: %v, want the older folded and the newest open", open)
	}
	if got := text(turnN(1) + " .turn-steps > summary"); !regexp.MustCompile(`^Steps, tool calls and timing: 2 steps · 1 tool call \(calculator\.add\) · \d+\.\d\d? m?s$`).MatchString(got) {
		t.Errorf("turn 1 folded reads %q; want its steps, its call and its time", got)
	}

	// Turn 3 fails part way: its half answer and the error are shown, and it is not sent on.
	ask("Add 2 and 3, please.", 3)
	if got := text(turnN(3) + " .answer-text"); got != "The sum " || turnState(3) != "failed" {
		t.Errorf("turn 3: %q (%s), want the half answer, failed", got, turnState(3))
	}
	if got := text(turnN(3) + ` .reply .outcome[data-kind="error"]`); !strings.Contains(got, "composing the answer failed part way") {
		t.Errorf("turn 3's error reads %q", got)
	}
	if got := text(turnN(3) + " .reply .not-sent"); !strings.HasPrefix(got, "Not sent with later questions") {
		t.Errorf("turn 3 says %q about being sent on", got)
	}
	if q := eval[string](p, `document.getElementById('question').value`); q != "Add 2 and 3, please." {
		t.Errorf("after a failed turn the question box holds %q, want the question back", q)
	}

	// Turn 4 has turns 1 and 2 before it, not the failed one.
	p4 := answered("Subtract 1 from that.", 4, "Minus 1, that is 9.")
	if want := "<<system>>'" + system + "'\n<<user>>'What is 2 plus 3?'\n<<assistant>>'2 plus 3 is 5.'\n<<user>>'Now multiply it by 2.'\n" +
		"<<assistant>>'Doubled, that is 10.'\n<<question>>Subtract 1 from that."; !strings.Contains(p4, want) || strings.Contains(p4, "Add 2 and 3") {
		t.Errorf("turn 4's prompt: want\n%s\nin\n%s\nand not the failed turn", want, p4)
	}
	// Each turn shows its own calls and waterfall.
	for n, call := range map[int]string{1: "calculator.add", 2: "calculator.multiply", 3: "calculator.add", 4: "calculator.subtract"} {
		if got := callsOf(n); !slices.Equal(got, []string{"Step 1: call " + call}) {
			t.Errorf("turn %d shows calls %q, want %s only", n, got, call)
		}
	}
	for n, call := range map[int]string{1: "calculator.add", 2: "calculator.multiply", 4: "calculator.subtract"} {
		checkWaterfall(t, p, turnN(n), []string{"retrieval Step 1: retrieval", "model Step 1: model", "call Step 1: " + call,
			"retrieval Step 2: retrieval", "model Step 2: model", "compose Composing the answer"})
	}
	// Each answered turn has its own trace.
	traces := eval[[]string](p, `[...document.querySelectorAll('#conversation .reply .turn-trace code')].map(c => c.textContent)`)
	if len(traces) != 4 || len(slices.Compact(slices.Sorted(slices.Values(traces)))) != 4 {
		t.Errorf("traces beside the answers: %q, want one of its own each", traces)
	}

	// Turn 5 is refused by the api (HTTP 400): the turn says why.
	ask(strings.Repeat("x", 9000), 5)
	if got := text(turnN(5) + ` .reply .outcome[data-kind="error"]`); turnState(5) != "failed" || !strings.Contains(got, "query: is 9000 bytes") {
		t.Errorf("turn 5 (too long): %s %q, want failed with the api's reason", turnState(5), got)
	}
	p.do(chromedp.Evaluate[chromedp.Void](`document.getElementById('question').value = ''`))
	p.checkAccessible()
	p.do(chromedp.Evaluate[chromedp.Void](`document.querySelector('` + turnN(1) + ` .turn-steps').open = false; window.scrollTo(0, 0)`))
	p.screenshot("chat")

	// New chat clears the conversation and keeps the system message.
	p.do(chromedp.Click(chromedp.ID("new-chat")))
	p.wait("an empty chat", `document.querySelectorAll('#conversation > li').length === 0 && document.getElementById('conversation').hidden &&
		!document.getElementById('chat-empty').hidden && document.getElementById('new-chat').disabled && document.activeElement.id === 'question'`)
	if kept := eval[string](p, `document.getElementById('system-message').value`); kept != system {
		t.Errorf("New chat left the system message %q, want it kept", kept)
	}
	if pr := answered("What is 2 plus 3?", 1, "2 plus 3 is 5."); strings.Contains(pr, "<<user>>") || !strings.Contains(pr, "<<system>>") {
		t.Errorf("after New chat the prompt holds earlier turns or lost the system message:\n%s", pr)
	}
	p.screenshot("new-chat")

	// A conversation longer than the model's context: the oldest turns are shortened or left
	// out, and the turn says so under its answer.
	p.do(chromedp.Click(chromedp.ID("new-chat")), chromedp.Evaluate[chromedp.Void](`document.getElementById('system-message').value = ''`))
	long := strings.Repeat("The weather was discussed at length, with many words about clouds. ", 22)
	for i := range 3 {
		q := strings.TrimSpace(fmt.Sprintf("Turn %d: %s", i, long)) // the page trims what it sends
		record(q, func(string, int, bool) string { return "Noted." })
		answered(q, i+1, "Noted.")
	}
	if hidden := eval[bool](p, `document.querySelector('`+turnN(1)+` .history-note').hidden`); !hidden {
		t.Errorf("the first turn, with no earlier turn, has a note on fitting them: %q", text(turnN(1)+" .history-note"))
	}
	answered("What is 2 plus 3?", 4, "2 plus 3 is 5.")
	note := text(lastTurn + " .history-note")
	if !regexp.MustCompile(`^(\d+ older turns? shortened(, \d+ left out)?|\d+ older turns? left out) to fit the model's context\.$`).MatchString(note) ||
		eval[bool](p, `document.querySelector('`+lastTurn+` .history-note').hidden`) {
		t.Errorf("the turn after three long ones says %q; want how many older turns were shortened or left out", note)
	}
	// The note tells of the step that saw the least, in that step's numbers.
	steps := eval[[]string](p, `[...document.querySelectorAll('`+lastTurn+` .step-history')].map(e => e.textContent)`)
	var cut []string
	for _, what := range []string{"shortened", "left out"} {
		if m := regexp.MustCompile(`(\d+) (?:older turns? )?` + what).FindStringSubmatch(note); m != nil {
			cut = append(cut, m[1]+" "+what)
		}
	}
	if want := "3 earlier turns given: " + strings.Join(cut, ", ") + " to fit the context."; !slices.Contains(steps, want) {
		t.Errorf("the note %q is none of the steps' fits %q (want %q)", note, steps, want)
	}
	t.Logf("history note: %s; steps: %q", note, steps)
	p.checkAccessible()
	p.do(chromedp.ScrollIntoView(chromedp.CSS(lastTurn)))
	p.screenshot("chat-history-fit")

	// New chat while a question runs stops it, and nothing of it comes back.
	m.model.set("Take your time with 2 plus 3.", func(string, int, bool) string { return "HANG" })
	before := m.double.Canceled()
	p.do(chromedp.SetValue(chromedp.ID("question"), "Take your time with 2 plus 3."), chromedp.Click(chromedp.ID("ask")))
	p.wait("the retrieval before the model answers", `!!document.querySelector('`+lastTurn+` .timeline > li[data-kind="retrieved"]')`)
	eventually.True(t, 5*time.Second, "the model request to start", func() bool { return m.double.Processing() > 0 })
	p.do(chromedp.Click(chromedp.ID("new-chat")))
	eventually.True(t, 5*time.Second, "the model request to be canceled after New chat", func() bool { return m.double.Canceled() > before })
	p.wait("Ask again", `!document.getElementById('ask').disabled && document.getElementById('stop').disabled`)
	got := eval[string](p, `document.querySelectorAll('#conversation > li').length + ' turns | status "' + document.getElementById('run-status').textContent +
		'" | question "' + document.getElementById('question').value + '"'`)
	if got != `0 turns | status "" | question ""` {
		t.Errorf("after New chat stopped a question: %s; want an empty chat", got)
	}
}

func TestConsoleAsksForToken(t *testing.T) {
	browser := startBrowser(t)
	const token = "console-test-token-0123456789abcdef"
	t.Setenv("TOOLMESH_API_TOKENS", "console:"+token)
	base := startApp(t, token, []string{
		"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--executor.grpc-addr=127.0.0.1:0",
		"--retriever.grpc-addr=127.0.0.1:0", "--inference.grpc-addr=127.0.0.1:0",
		"--demo.calculator-addr=127.0.0.1:0", "--demo.converter-addr=127.0.0.1:0", "--demo.sqlite-addr=127.0.0.1:0",
		"--drain-timeout=2s", "--llm-url=http://127.0.0.1:1",
	}, "demo", "executor", "retriever", "inference", "api")

	p := openPage(t, browser, base+"/ui/")
	p.wait("the token prompt", `document.getElementById('token-dialog').open && document.activeElement.id === 'token-input'`)
	if n := eval[int](p, `document.querySelectorAll('#servers-table tbody tr').length`); n != 0 {
		t.Errorf("%d servers shown before a token was given", n)
	}
	p.screenshot("asks-for-token")

	p.do(chromedp.SendKeys(chromedp.ID("token-input"), "not-the-token-0123456789"+kb.Enter))
	p.wait("the prompt again, saying why", `document.getElementById('token-dialog').open && !document.getElementById('token-error').hidden`)
	if msg := eval[string](p, `document.getElementById('token-error').textContent`); !strings.Contains(msg, "refused") {
		t.Errorf("after a wrong token the prompt says %q; want it to say the token was refused", msg)
	}
	p.screenshot("token-refused")

	p.do(chromedp.SendKeys(chromedp.ID("token-input"), token+kb.Enter))
	p.wait("servers listed with the token", `!document.getElementById('token-dialog').open && document.querySelectorAll('#servers-table tbody tr').length === 3`)
	if kept := eval[string](p, `sessionStorage.getItem('toolmesh.token')`); kept != token {
		t.Errorf("sessionStorage holds %q, want the token", kept)
	}
	// Kept for the tab: a reload asks no more, and other pages' calls carry it too.
	p.do(chromedp.Navigate(base + "/ui/#/tools/calculator.add"))
	p.wait("the call form", `!!document.querySelector('#call-form [data-field="b"] input')`)
	p.do(chromedp.SendKeys(chromedp.CSS(`#call-form [data-field="a"] input`), "2"),
		chromedp.SendKeys(chromedp.CSS(`#call-form [data-field="b"] input`), "3"+kb.Enter))
	p.wait("the result", `document.querySelector('#call-result .content-text')?.textContent === '5'`)
	if open := eval[bool](p, `document.getElementById('token-dialog').open`); open {
		t.Errorf("the token was asked again after a reload")
	}
	p.screenshot("with-token")

	// The API reference needs the token too: the link fetches it with the token and opens what
	// came back in a new tab, which must show the OpenAPI document.
	opened := chromedp.WaitNewTarget(p.ctx, func(info *cdptarget.Info) bool { return strings.HasPrefix(info.URL, "blob:") })
	p.do(chromedp.Click(chromedp.ID("api-docs")))
	select {
	case id := <-opened:
		tab, cancel := chromedp.NewContext(p.ctx, chromedp.WithTargetID(id))
		doc, err := chromedp.Run(tab, chromedp.Poll[string](`document.body && document.body.innerText.includes('"swagger"') && document.body.innerText.slice(0, 60)`,
			chromedp.WithPollingTimeout(10*time.Second)))
		if err != nil || !strings.Contains(doc, `"swagger": "2.0"`) {
			t.Errorf("the API reference opened with a token shows %q (%v), want the OpenAPI document", doc, err)
		}
		cancel()
	case <-time.After(10 * time.Second):
		p.screenshot("failed")
		t.Errorf("the API reference link opened no tab with a token")
	}

	// No model answers here (--llm-url points at a closed port): every page says so with the
	// command that fixes it, and a question gets that sentence rather than the raw 503.
	p.wait("the mesh's state", `!!document.querySelector('#mesh [data-part="model"]')`)
	// The command is the inference service's to choose: read it where the page does.
	var ready struct {
		Inference struct {
			Fix string `json:"fix"`
		} `json:"inference"`
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/readyz", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&ready)
	resp.Body.Close()
	if err != nil || ready.Inference.Fix == "" {
		t.Fatalf("/readyz names no fix for the missing model (%v)", err)
	}
	// Commands are set in backticks there; on the page as code, without the backticks.
	fix := strings.ReplaceAll(ready.Inference.Fix, "`", "")
	var commands []string
	for i, part := range strings.Split(ready.Inference.Fix, "`") {
		if i%2 == 1 {
			commands = append(commands, part)
		}
	}
	if got, want := eval[string](p, meshTextJS), "3 of 3 servers ready · 11 tools indexed · model not ready Questions need it. To fix: "+fix; got != want {
		t.Errorf("mesh state without a model:\n%s\nwant\n%s", got, want)
	}
	if got := eval[[]string](p, `[...document.querySelectorAll('#mesh .fix code')].map(c => c.textContent)`); len(commands) == 0 || !slices.Equal(got, commands) {
		t.Errorf("the fix's commands set as code: %q, want %q", got, commands)
	}
	p.do(chromedp.Navigate(base+"/ui/#/playground"), chromedp.SendKeys(chromedp.ID("question"), "What is 2 plus 3?"), chromedp.Click(chromedp.ID("ask")))
	p.wait("the 503 explained", `!!document.querySelector('.turn .outcome[data-kind="unavailable"] .fix')`)
	said := eval[string](p, `(li => li.querySelector('h3').textContent + ' | ' + li.querySelector('.fix').textContent + ' | ' +
		[...li.querySelectorAll(':scope > :not(details)')].map(e => e.textContent).join(' '))(document.querySelector('.turn .outcome[data-kind="unavailable"]'))`)
	if !strings.HasPrefix(said, "Not answered: no model answers questions yet | To fix: "+fix+" | ") || strings.Contains(said, "`") {
		t.Errorf("the 503 reads %q; want one sentence with the command, no backticks", said)
	}
	if n := eval[int](p, `document.querySelectorAll('.turn .outcome[data-kind="unavailable"] code').length`); n < 1 {
		t.Errorf("the command is not set as code")
	}
	if status := eval[string](p, `document.getElementById('run-status').textContent`); status != "Query not answered." {
		t.Errorf("run status %q", status)
	}
	p.checkAccessible()
	p.screenshot("no-model-question")
	// The api's own words are one click away, their commands as code too.
	p.do(chromedp.Click(chromedp.CSS(`.turn .outcome[data-kind="unavailable"] summary`)))
	if msg := eval[string](p, `document.querySelector('.turn .api-message').textContent`); !strings.Contains(msg, "no model to answer with") || strings.Contains(msg, "`") {
		t.Errorf("the api's message reads %q", msg)
	}
	p.screenshot("no-model-question-details")
}

// TestConsoleToolPatternsCheckedByTheServer calls a tool whose schema has a catastrophic
// pattern, ^(a+)+$, with an input that makes a backtracking engine run for ever: the page
// sends it at once (it runs no schema pattern itself) and shows the api's refusal on the field.
func TestConsoleToolPatternsCheckedByTheServer(t *testing.T) {
	browser := startBrowser(t)
	srv := servePatternTool()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	cfg := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `{"mcpServers": {"pat": {"url": "%s/mcp"}}}`, srv.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	base := startApp(t, "", []string{
		"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--executor.grpc-addr=127.0.0.1:0",
		"--api.retriever-addr=", "--api.inference-addr=", "--drain-timeout=2s", "--mcp-config=" + cfg,
	}, "executor", "api")

	p := openPage(t, browser, base+"/ui/#/tools/pat.check")
	p.wait("the call form", `!!document.querySelector('#call-form [data-field="code"] :is(input, textarea)')`)
	if hint := eval[string](p, `document.querySelector('#call-form [data-field="code"] .type').textContent`); hint != "string matching ^(a+)+$" {
		t.Errorf("the field's type reads %q", hint)
	}
	// 2^40 ways to split the a's: minutes to hours for a backtracking engine.
	evil := strings.Repeat("a", 40) + "!"
	p.do(chromedp.SetValue(chromedp.CSS(`#call-form [data-field="code"] :is(input, textarea)`), evil))
	p.doWithin(10*time.Second, chromedp.Click(chromedp.CSS(`#call-form button[type="submit"]`)))
	p.waitWithin(10*time.Second, "the api's refusal", `!!document.querySelector('#call-result .call-error')`)
	got := eval[string](p, `document.querySelector('#call-result h3').textContent + ' | ' + document.querySelector('[data-field="code"] .field-error').textContent +
		' | focus ' + document.activeElement.name + ' invalid=' + document.activeElement.getAttribute('aria-invalid')`)
	want := regexp.MustCompile(`^The call was refused HTTP 400 \| code was refused: .*does not match pattern .*\^\(a\+\)\+\$.*\. \| focus code invalid=true$`)
	if !want.MatchString(got) {
		t.Errorf("after calling with %q: %q, want the api's refusal on the field", evil, got)
	}
	p.checkAccessible()
	p.screenshot("pattern-refused-by-server")

	// A matching value goes through.
	p.do(chromedp.SetValue(chromedp.CSS(`#call-form [data-field="code"] :is(input, textarea)`), "aaa"),
		chromedp.Click(chromedp.CSS(`#call-form button[type="submit"]`)))
	p.waitWithin(10*time.Second, "the result", `document.querySelector('#call-result .content-text')?.textContent === 'ok: aaa'`)
	if invalid := eval[bool](p, `!!document.querySelector('#call-form [aria-invalid]')`); invalid {
		t.Errorf("the field is still marked invalid after a good call")
	}
}

// servePatternTool is an MCP server over streamable HTTP whose one tool, check, takes a string
// that must match ^(a+)+$.
func servePatternTool() *httptest.Server {
	m := server.NewMCPServer("pat", "0.1.0", server.WithToolCapabilities(true))
	m.AddTool(mcp.NewTool("check", mcp.WithDescription("Check a code made of a's."),
		mcp.WithString("code", mcp.Required(), mcp.Pattern(`^(a+)+$`))),
		func(_ context.Context, r mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("ok: " + r.GetString("code", "")), nil
		})
	return httptest.NewServer(server.NewStreamableHTTPServer(m))
}

// TestConsoleTraceLinkOpensJaeger follows the playground's trace link into a real Jaeger (v2,
// receiving the mesh's spans over OTLP): the link is the trace of the question just answered,
// and Jaeger's UI shows it.
func TestConsoleTraceLinkOpensJaeger(t *testing.T) {
	browser := startBrowser(t)
	j := jaegertest.Start(t)
	// Spans leave in batches: a short delay keeps the test quick.
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	m := startMesh(t, "--otel.endpoint="+j.OTLPEndpoint, "--api.jaeger-url="+j.QueryURL)
	m.model.set("What is 2 plus 3?", addTwoAndThree)
	p := openPage(t, browser, m.base+"/ui/#/playground")
	p.do(chromedp.SendKeys(chromedp.ID("question"), "What is 2 plus 3?"), chromedp.Click(chromedp.ID("ask")))
	p.wait("the query to finish", `!!document.querySelector('.turn .timeline > li[data-kind="done"] a.trace-link')`)
	link := eval[string](p, `document.querySelector('.turn .timeline > li[data-kind="done"] a.trace-link').href`)
	id, ok := strings.CutPrefix(link, j.QueryURL+"/trace/")
	if !ok || len(id) != 32 {
		t.Fatalf("trace link %q, want %s/trace/TRACE_ID", link, j.QueryURL)
	}
	if top := eval[string](p, `document.querySelector('.turn .reply .turn-trace a.trace-link').href`); top != link {
		t.Errorf("the link beside the answer %q, the one under the steps %q", top, link)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tr, err := j.WaitTrace(ctx, id, func(tr jaegertest.Trace) bool {
		return len(tr.Named("invoke_agent toolmesh")) == 1 && len(tr.Named("execute_tool calculator.add")) == 1
	})
	if err != nil {
		t.Fatalf("the linked trace in Jaeger: %v", err)
	}
	t.Logf("%s", tr)
	p.screenshot("playground-trace-link")
	// The link opens Jaeger's UI, which reads the trace from /api/traces/ID. (A Jaeger built
	// without its UI assets, as scripts/jaeger's is, serves a placeholder page there instead.)
	p.do(chromedp.Navigate(link))
	p.waitWithin(30*time.Second, "Jaeger's page", `document.title.includes('Jaeger') || document.body.innerText.includes('Jaeger UI')`)
	if eval[bool](p, `document.body.innerText.includes('execute_tool calculator.add')`) {
		t.Logf("Jaeger's UI shows the trace")
	} else {
		t.Logf("Jaeger's UI page loaded without the trace drawn (no UI assets in this build): checking the API it reads")
	}
	p.screenshot("jaeger-trace")
	code, b := get(t, j.QueryURL+"/api/traces/"+id)
	if code != http.StatusOK || !strings.Contains(string(b), `"traceID":"`+id+`"`) || !strings.Contains(string(b), "execute_tool calculator.add") {
		t.Errorf("GET %s/api/traces/%s (what Jaeger's trace page reads): %d %.300s", j.QueryURL, id, code, b)
	}
}

// TestConsoleAuth checks, without a browser, what the console's routes need with API tokens
// set: the page and its script load without one (so it can ask for one); its settings and
// every API call need it.
func TestConsoleAuth(t *testing.T) {
	const token = "console-auth-token-0123456789abcdef"
	t.Setenv("TOOLMESH_API_TOKENS", "console:"+token)
	base := startApp(t, token, []string{
		"--api.http-addr=127.0.0.1:0", "--api.grpc-addr=127.0.0.1:0", "--executor.grpc-addr=127.0.0.1:0",
		"--api.retriever-addr=", "--api.inference-addr=", "--drain-timeout=2s",
		"--api.jaeger-url=http://jaeger.invalid:16686",
	}, "executor", "api")
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	cases := []struct {
		method, path, auth string
		want               int
		body               string // the body contains this
	}{
		{"GET", "/ui", "", http.StatusTemporaryRedirect, ""},
		{"GET", "/ui/", "", 200, "<title>toolmesh console</title>"},
		{"GET", "/ui/app.js", "", 200, "sessionStorage"},
		{"GET", "/ui/style.css", "", 200, ":focus-visible"},
		{"GET", "/ui/config.json", "", 401, "missing Authorization header"},
		{"GET", "/ui/config.json", "Bearer not-the-token-0123456789", 401, "unknown token"},
		{"GET", "/ui/config.json", "Bearer " + token, 200, `{"jaeger_url":"http://jaeger.invalid:16686"}`},
		{"GET", "/ui/nope", "", 401, ""},
		{"GET", "/ui/nope", "Bearer " + token, 404, ""},
		{"POST", "/ui/", "", 401, ""},
		{"GET", "/v1/servers", "", 401, ""},
		{"GET", "/v1/servers", "Bearer " + token, 200, `"servers"`},
		// A browser opening the root is sent to the console (which then asks for the token);
		// any other client keeps the answers it had.
		{"GET", "/ html", "", http.StatusFound, ""},
		{"GET", "/", "", 401, ""},
		{"GET", "/", "Bearer " + token, 404, "no route for GET /"},
		{"POST", "/ html", "", 401, ""},
	}
	for _, tc := range cases {
		path, html := strings.CutSuffix(tc.path, " html")
		req, _ := http.NewRequest(tc.method, base+path, nil)
		if html {
			req.Header.Set("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
		}
		if tc.method == "POST" {
			req.Header.Set("Content-Type", "application/json")
		}
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusFound && resp.Header.Get("Location") != "/ui/" {
			t.Errorf("%s %s: redirect to %q, want /ui/", tc.method, tc.path, resp.Header.Get("Location"))
		}
		if resp.StatusCode != tc.want || !strings.Contains(string(b), tc.body) {
			t.Errorf("%s %s with %q: %d %.200s; want %d with %q", tc.method, tc.path, tc.auth, resp.StatusCode, b, tc.want, tc.body)
		}
	}
}

// addTwoAndThree is the model's script for "What is 2 plus 3?": call calculator.add, then
// answer with its result.
func addTwoAndThree(p string, calls int, compose bool) string {
	switch {
	case compose:
		return "2 plus 3 is " + outputOf(p) + "."
	case calls == 0:
		return "<<function>>calculator.add(a=2, b=3)"
	}
	return "The sum is " + outputOf(p)
}

// meshTextJS is the mesh's state bar as a person reads it.
const meshTextJS = `document.getElementById('mesh').textContent.replace(/\s+/g, ' ').trim()`

// timedResponse is the timing part of a QueryResponse, as its JSON reads.
type timedResponse struct {
	DurationMs     float64 `json:"duration_ms"`
	ComposeStartMs float64 `json:"compose_start_ms"`
	ComposeMs      float64 `json:"compose_ms"`
	Steps          []struct {
		RetrievalStartMs float64 `json:"retrieval_start_ms"`
		RetrievalMs      float64 `json:"retrieval_ms"`
		ModelStartMs     float64 `json:"model_start_ms"`
		ModelMs          float64 `json:"model_ms"`
	} `json:"steps"`
	ToolCalls []struct {
		StartMs    float64 `json:"start_ms"`
		DurationMs float64 `json:"duration_ms"`
	} `json:"tool_calls"`
}

// checkWaterfall checks the waterfall of the turn that turn (a CSS selector) names: its rows
// (kind and label) in order of their start, each with a start and a duration, and its bars
// inside the time axis, each starting where its row says. A folded turn is opened to measure.
func checkWaterfall(t *testing.T, p *page, turn string, want []string) {
	t.Helper()
	type row struct {
		Kind, Label, Start, Took string
		Left, Width, Track       float64
	}
	p.do(chromedp.Evaluate[chromedp.Void](`document.querySelector('` + turn + ` .turn-steps').open = true`))
	rows := eval[[]row](p, `[...document.querySelectorAll('`+turn+` .waterfall tbody tr')].map(tr => {
		const bar = tr.querySelector('.bar').getBoundingClientRect(), track = tr.querySelector('.track').getBoundingClientRect();
		return {Kind: tr.dataset.kind, Label: tr.querySelector('th').textContent, Start: tr.cells[1].textContent, Took: tr.cells[2].textContent,
			Left: bar.left - track.left, Width: bar.width, Track: track.width};
	})`)
	var got []string
	for _, r := range rows {
		got = append(got, r.Kind+" "+r.Label)
	}
	if !slices.Equal(got, want) {
		t.Errorf("waterfall rows:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	duration := regexp.MustCompile(`^\d+\.\d\d? (ms|s)$`)
	caption := eval[string](p, `document.querySelector('`+turn+` .waterfall caption').textContent`)
	if !regexp.MustCompile(`^Where the time went: \d+\.\d\d? (ms|s) in all$`).MatchString(caption) {
		t.Errorf("waterfall caption %q", caption)
	}
	lastLeft := -1.0
	for _, r := range rows {
		if !duration.MatchString(r.Start) || !duration.MatchString(r.Took) {
			t.Errorf("waterfall row %q: starts at %q, took %q; want durations", r.Label, r.Start, r.Took)
		}
		if r.Width < 1 || r.Left < lastLeft || r.Left+r.Width > r.Track+1 {
			t.Errorf("waterfall row %q: bar at %.1f px, %.1f px wide, on a %.1f px axis (the one before at %.1f px)", r.Label, r.Left, r.Width, r.Track, lastLeft)
		}
		lastLeft = r.Left
	}
}
