package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/user"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/pinfile"
	"github.com/toolmesh/toolmesh/internal/toolid"
	"github.com/toolmesh/toolmesh/internal/tooltext"
)

const pendingUsage = `Usage: toolmesh tools pending [--server S] [flags]

Lists the tool definitions waiting for approval: tools whose definition changed since it was
pinned (mcpServers pinning: warn flags them, enforce quarantines them: not listed, offered or
callable), and tools first seen with findings under enforce. Each comes with what was found
in it (hidden characters removed, text that reads as instructions to the model, as hiding
things from the user, or as reading files and secrets), the hash to approve, and a diff from
its pin. Needs an admin token: one whose scope calls and lists every tool.`

const approveUsage = `Usage: toolmesh tools approve SERVER.TOOL [--hash H] [--pin-file FILE] [flags]

Pins the definition SERVER.TOOL lists now and releases it from quarantine, on every executor
replica (they share the pin file). SERVER__TOOL, the tool's name on the MCP endpoints, works
too. --hash names the definition you reviewed (toolmesh tools
pending prints it): if the server changed it again since, nothing is approved. Needs an admin
token: one whose scope calls and lists every tool.

When the executors cannot write the pin file (a Kubernetes ConfigMap), --pin-file FILE records
the approval in FILE, a copy of it, instead; then update the ConfigMap from FILE.`

func runToolsPending(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tools pending", stderr, pendingUsage)
	var c client
	c.register(fs)
	server := fs.String("server", "", "only this server's tools")
	if err := parseFlags(fs, func() error { return fs.Parse(args) }); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("toolmesh tools pending: unexpected argument %q", fs.Arg(0))
	}
	c.init()
	pending, data, err := fetchPending(ctx, &c, *server)
	if err != nil {
		return err
	}
	if c.asJSON {
		_, err := stdout.Write(data)
		return err
	}
	if len(pending) == 0 {
		_, err := fmt.Fprintln(stdout, "No tool definition waits for approval.")
		return err
	}
	for i, p := range pending {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		writePending(stdout, p)
	}
	return nil
}

// approvableIDs is the ids of the tools the caller may approve: those waiting for approval
// (a quarantined one is not listed) and those listed, sorted.
func (c *client) approvableIDs(ctx context.Context) ([]string, error) {
	pending, _, err := fetchPending(ctx, c, "")
	if err != nil {
		return nil, err
	}
	ids, err := c.toolIDs(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range pending {
		ids = append(ids, p.GetTool().GetId())
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// fetchPending is GET /v1/tools:pending, decoded, and its body.
func fetchPending(ctx context.Context, c *client, server string) ([]*toolmeshv1.PendingTool, []byte, error) {
	path := "/v1/tools:pending"
	if server != "" {
		path += "?server=" + url.QueryEscape(server)
	}
	data, err := c.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, nil, err
	}
	var resp toolmeshv1.ListPendingToolsResponse
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, &resp); err != nil {
		return nil, nil, fmt.Errorf("decode pending tools: %w", err)
	}
	return resp.GetTools(), data, nil
}

// writePending writes one pending definition for people: what it is, why it waits, what was
// found in it, how to approve it, and the diff.
func writePending(w io.Writer, p *toolmeshv1.PendingTool) {
	t := p.GetTool()
	state, effect := "flagged (pinning: warn)", "still listed, offered and callable"
	if p.GetQuarantined() {
		state, effect = "quarantined (pinning: enforce)", "not listed, offered or callable until approved"
	}
	why := "it was first seen with findings and was never pinned"
	if p.GetPinned() != nil {
		why = fmt.Sprintf("its definition changed since it was pinned (%s, %s)", p.GetPinnedBy(), when(p.GetPinnedAt().AsTime()))
	}
	fmt.Fprintf(w, "%s: %s: %s\n", t.GetId(), state, why)
	if s := p.GetSince(); s != nil {
		effect += "; listed so since " + when(s.AsTime())
	}
	fmt.Fprintf(w, "  %s\n", effect)
	if fs := t.GetFindings(); len(fs) > 0 {
		fmt.Fprintln(w, "  findings:")
		for _, f := range fs {
			kind := strings.ToLower(strings.TrimPrefix(f.GetKind().String(), "FINDING_KIND_"))
			fmt.Fprintf(w, "    %s in %s (%s): %s\n", kind, f.GetField(), f.GetRule(), f.GetExcerpt())
		}
	}
	fmt.Fprintf(w, "  approve what you reviewed: toolmesh tools approve %s --hash %s\n", t.GetId(), t.GetHash())
	for _, line := range strings.Split(strings.TrimRight(p.GetDiff(), "\n"), "\n") {
		fmt.Fprintln(w, "  "+shown(line))
	}
}

// findingWords are the findings' kinds as the console words them.
var findingWords = map[string]string{
	"FINDING_KIND_HIDDEN_CHARACTERS": "hidden characters removed",
	"FINDING_KIND_MODEL_INSTRUCTION": "instructions to the model",
	"FINDING_KIND_CONCEAL_FROM_USER": "hides things from the user",
	"FINDING_KIND_READ_SECRETS":      "reads files or secrets",
}

// toolFlags is what `toolmesh tools` says of a tool's trust: "[changed since approved; flagged:
// instructions to the model]", or "" for a tool with nothing to say.
func toolFlags(t toolJSON) string {
	var parts, kinds []string
	if t.Pin == toolmeshv1.PinState_PIN_STATE_CHANGED.String() {
		parts = append(parts, "changed since approved")
	}
	for _, f := range t.Findings {
		w := findingWords[f.Kind]
		if w == "" {
			w = f.Kind
		}
		if !slices.Contains(kinds, w) {
			kinds = append(kinds, w)
		}
	}
	if len(kinds) > 0 {
		parts = append(parts, "flagged: "+strings.Join(kinds, ", "))
	}
	if len(parts) == 0 {
		return ""
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

// shown is a tool's text for a terminal: the executor removes hidden and control characters,
// and this keeps an api that did not (an older one) from sending escape sequences to it.
func shown(s string) string {
	clean, _ := tooltext.Clean("description", s)
	return clean
}

func when(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

func runToolsApprove(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tools approve", stderr, approveUsage)
	var c client
	c.register(fs)
	hash := fs.String("hash", "", "the definition you reviewed (toolmesh tools pending prints it); another is not approved")
	file := fs.String("pin-file", "", "record the approval in this copy of the pin file instead of asking the executors (a ConfigMap they cannot write)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return usageError("toolmesh tools approve: name the tool, as SERVER.TOOL (or SERVER__TOOL, its name on the MCP endpoints)")
	}
	c.init()
	server, name, err := c.resolveTool(ctx, "tools approve", pos[0], c.approvableIDs)
	if err != nil {
		return err
	}
	id := toolid.Join(server, name)
	if *file != "" {
		return approveInto(ctx, &c, *file, id, server, *hash, stdout)
	}
	body := map[string]string{}
	if *hash != "" {
		body["hash"] = *hash
	}
	data, err := c.do(ctx, http.MethodPost, "/v1/tools/"+url.PathEscape(server)+"/"+url.PathEscape(name)+":approve", body)
	if err != nil {
		return err
	}
	if c.asJSON {
		_, err := stdout.Write(data)
		return err
	}
	var resp toolmeshv1.ApproveToolResponse
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, &resp); err != nil {
		return fmt.Errorf("decode approval: %w", err)
	}
	_, err = fmt.Fprintf(stdout, "%s approved: its definition %s is pinned, and every executor serves it.\n", id, resp.GetTool().GetHash())
	return err
}

// approveInto records the approval of id's pending definition in the pin file at path (a copy
// of a ConfigMap's), as an executor would.
func approveInto(ctx context.Context, c *client, path, id, server, hash string, stdout io.Writer) error {
	pending, _, err := fetchPending(ctx, c, server)
	if err != nil {
		return err
	}
	var p *toolmeshv1.PendingTool
	for _, x := range pending {
		if x.GetTool().GetId() == id {
			p = x
		}
	}
	switch {
	case p == nil:
		return fmt.Errorf("%s has no definition waiting for approval (toolmesh tools pending lists those that have)", id)
	case hash != "" && hash != p.GetTool().GetHash():
		return fmt.Errorf("%s lists definition %s now, not %s, which --hash names: review it again (toolmesh tools pending)", id, p.GetTool().GetHash(), hash)
	}
	t := p.GetTool()
	t.Pin = toolmeshv1.PinState_PIN_STATE_UNSPECIFIED
	pin := pinfile.Pin{Hash: t.GetHash(), PinnedAt: time.Now().UTC(), PinnedBy: "toolmesh tools approve (" + whoAmI() + ")", Tool: pinfile.Encode(t)}
	if _, err := pinfile.Update(path, func(f *pinfile.File) bool {
		f.Pins[id] = pin
		return true
	}); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w (create the copy first, e.g. from the ConfigMap)", err)
		}
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s: definition %s recorded in %s.\nUpdate the pin file the executors read from it: with the Helm chart\n"+
		"  helm upgrade RELEASE CHART --reuse-values --set-file executor.pins.file=%s\n"+
		"or, with a ConfigMap of your own (executor.pins.existingConfigMap),\n"+
		"  kubectl create configmap NAME --from-file=pins.json=%s --dry-run=client -o yaml | kubectl apply -f -\n"+
		"Every executor takes it within a minute or two (the kubelet's sync, then --executor.pin-poll).\n", id, t.GetHash(), path, path, path)
	return err
}

func whoAmI() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "unknown user"
}
