package app

import (
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// TestConsolePromptsAndResources uses the console's prompts and resources page: a token sees its
// server's prompts, fills in a prompt's arguments and reads a resource.
func TestConsolePromptsAndResources(t *testing.T) {
	browser := startBrowser(t)
	m, _, tokens := promptsMesh(t)
	p := openPage(t, browser, m.base+"/ui/#/context")
	p.wait("the token prompt", `document.getElementById('token-dialog').open`)
	p.do(chromedp.SendKeys(chromedp.ID("token-input"), tokens[1]+kb.Enter))
	p.wait("everything's prompts listed", `!!document.querySelector('[data-prompt="everything.args-prompt"]')`)
	if n := eval[int](p, `document.querySelectorAll('[data-prompt="everything.simple-prompt"]').length`); n != 0 {
		t.Errorf("an excluded prompt is listed")
	}
	p.do(chromedp.Click(chromedp.CSS(`[data-prompt="everything.args-prompt"]`)))
	p.wait("the prompt's form", `!!document.querySelector('#prompt-form [data-field="city"] input[required]')`)
	p.do(chromedp.SendKeys(chromedp.CSS(`#prompt-form [data-field="city"] input`), "Paris"),
		chromedp.Click(chromedp.CSS(`#prompt-form button[type="submit"]`)))
	p.wait("the prompt's message", `document.querySelector('#prompt-result .content-text')?.textContent === "What's weather in Paris?"`)
	p.checkAccessible()
	p.screenshot("prompt")

	p.do(chromedp.Click(chromedp.CSS(`[data-resource="demo://resource/static/document/architecture.md"]`)))
	p.wait("the resource's text", `(document.querySelector('#context-detail .resource-text')?.textContent || '').length > 100`)
	p.do(chromedp.Click(chromedp.CSS(`[data-resource="demo://resource/static/document/structure.md"]`)))
	p.wait("an oversized resource refused, saying why", `(document.querySelector('#context-detail .call-error')?.textContent || '').includes('over the 4096-byte limit')`)
	p.screenshot("resource-refused")
}
