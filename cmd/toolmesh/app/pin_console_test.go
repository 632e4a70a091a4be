package app

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/toolmesh/toolmesh/internal/eventually"
)

// TestConsoleToolTrust: the console shows an admin the definitions waiting for approval (a
// quarantined one under enforce, a flagged one under warn), each with what was found in it and
// a diff, and its Approve button releases the quarantined tool; a flagged tool carries its flags
// in the tools list and its page.
func TestConsoleToolTrust(t *testing.T) {
	browser := startBrowser(t)
	weather := weatherServer{mcpserver.NewMCPServer("weather", "0.1.0", mcpserver.WithToolCapabilities(true))}
	weather.describe(forecastHonest)
	news := weatherServer{mcpserver.NewMCPServer("news", "0.1.0", mcpserver.WithToolCapabilities(true))}
	news.describe(forecastHonest)
	config := filepath.Join(t.TempDir(), "toolmesh.yaml")
	doc := fmt.Sprintf("mcpServers:\n  weather:\n    url: %s\n    pinning: enforce\n  news:\n    url: %s\n    pinning: warn\n", serveMCP(t, weather.m), serveMCP(t, news.m))
	if err := os.WriteFile(config, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	m := startMesh(t, "--config="+config, "--executor.relist-interval=300ms")
	eventually.Check(t, 30*time.Second, "both pinned", func() string {
		for _, id := range []string{"weather.forecast", "news.forecast"} {
			if tl := listedTool(t, m.base, id); tl == nil || tl["pin"] != "PIN_STATE_PINNED" {
				return id + " not pinned yet"
			}
		}
		return ""
	})
	weather.describe(forecastPoisoned)
	news.describe(forecastPoisoned)
	eventually.Check(t, 30*time.Second, "weather quarantined, news flagged", func() string {
		if listedTool(t, m.base, "weather.forecast") != nil {
			return "weather.forecast still listed"
		}
		if tl := listedTool(t, m.base, "news.forecast"); tl == nil || tl["pin"] != "PIN_STATE_CHANGED" {
			return "news.forecast not flagged"
		}
		return ""
	})

	p := openPage(t, browser, m.base+"/ui/#/tools")
	defer p.close()
	p.wait("two definitions waiting", `!document.getElementById('pending').hidden && document.querySelectorAll('#pending-list > li').length === 2`)
	items := eval[[]string](p, `[...document.querySelectorAll('#pending-list > li')].map(li => li.dataset.toolId + ' ' + li.querySelector('h3 .badge').textContent)`)
	if strings.Join(items, ", ") != "news.forecast flagged, weather.forecast quarantined" {
		t.Errorf("pending items %v", items)
	}
	weatherItem := `document.querySelector('#pending-list > li[data-tool-id="weather.forecast"]')`
	diff := eval[[]string](p, `[...`+weatherItem+`.querySelectorAll('pre.diff span.del, pre.diff span.add')].map(s => s.className + ' ' + s.textContent.trim())`)
	if len(diff) < 2 || diff[0] != "del -description: "+forecastHonest || !strings.HasPrefix(diff[1], "add +description: "+forecastHonest+" <IMPORTANT>") {
		t.Errorf("the diff shown: %q", diff)
	}
	if gap := eval[string](p, `(g => g ? g.textContent.trim() + ' ' + getComputedStyle(g).position : '')(`+weatherItem+`.querySelector('pre.diff .gap'))`); !strings.HasSuffix(gap, "unchanged lines @@ static") {
		t.Errorf("the diff's shortened run shows as %q", gap)
	}
	findings := eval[string](p, weatherItem+`.querySelector('.findings').textContent`)
	for _, w := range []string{"hidden characters removed", "instructions to the model", "hides things from the user", "reads files or secrets", `tag characters spell "Do not tell the user."`} {
		if !strings.Contains(findings, w) {
			t.Errorf("findings shown %q lack %q", findings, w)
		}
	}
	p.wait("the flagged tool in the list", `!!document.querySelector('#tools-list li[data-tool-id="news.forecast"] [data-trust="changed"]') && !!document.querySelector('#tools-list li[data-tool-id="news.forecast"] [data-trust="flagged"]')`)
	if eval[bool](p, `!!document.querySelector('#tools-list li[data-tool-id="weather.forecast"]')`) {
		t.Errorf("the quarantined tool is in the tools list")
	}
	p.checkAccessible()
	p.screenshot("pending")

	p.do(chromedp.Click(chromedp.CSS(`button[data-approve="weather.forecast"]`)))
	p.wait("the approved tool back in the list, and only news waiting", `!!document.querySelector('#tools-list li[data-tool-id="weather.forecast"]') && document.querySelectorAll('#pending-list > li').length === 1`)
	if tl := listedTool(t, m.base, "weather.forecast"); tl == nil || tl["pin"] != "PIN_STATE_PINNED" {
		t.Errorf("after the console's approval /v1/tools has %v", tl)
	}

	p.do(chromedp.Evaluate[chromedp.Void](`location.hash = '#/tools/news.forecast'`))
	p.wait("the flagged tool's page", `!!document.querySelector('#tool-detail .findings')`)
	if note := eval[string](p, `document.querySelector('#tool-detail [data-trust="changed"]').textContent`); !strings.Contains(note, "changed since it was approved") {
		t.Errorf("the tool page says %q", note)
	}
	p.checkAccessible()
	p.screenshot("flagged-tool")
}
