package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/toolmesh/toolmesh/internal/closest"
	"github.com/toolmesh/toolmesh/internal/toolid"
	"github.com/toolmesh/toolmesh/internal/toolid/toolname"
)

// toolIDs is the ids of the tools the caller may list, sorted.
func (c *client) toolIDs(ctx context.Context) ([]string, error) {
	data, err := c.do(ctx, http.MethodGet, "/v1/tools", nil)
	if err != nil {
		return nil, err
	}
	var out struct{ Tools []toolJSON }
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("decode tools: %w", err)
	}
	ids := make([]string, len(out.Tools))
	for i, t := range out.Tools {
		ids[i] = t.ID
	}
	slices.Sort(ids)
	return ids, nil
}

// resolveTool returns the server and tool name that arg names: SERVER.TOOL as it is, or the
// name the MCP endpoints show for a tool (SERVER__TOOL), which is looked up among the ids
// known returns (the tools the caller may list, for a call) with the endpoints' own mapping
// (internal/toolid/toolname), so that a name the endpoints cut or gave a hash suffix resolves
// too. cmd names the command in messages.
func (c *client) resolveTool(ctx context.Context, cmd, arg string, known func(context.Context) ([]string, error)) (server, name string, err error) {
	if strings.Contains(arg, ".") {
		server, name, ok := toolid.Split(arg)
		switch {
		case server == "" || name == "":
			return "", "", usageError("toolmesh %s: %q is not SERVER.TOOL", cmd, arg)
		case !ok:
			return "", "", usageError("toolmesh %s: server %q must match %s", cmd, server, toolid.ServerRule)
		}
		return server, name, nil
	}
	ids, err := known(ctx)
	if err != nil {
		return "", "", err
	}
	if id, ok := toolname.New(ids...).ID(arg); ok {
		server, name, _ := toolid.Split(id)
		return server, name, nil
	}
	return "", "", usageError("toolmesh %s: %q is not SERVER.TOOL, nor the name the MCP endpoints show for a tool (SERVER__TOOL)%s",
		cmd, arg, didYouMean(nearestTool(arg, ids)))
}

// nearestTool is the id of the tool nearest to what the user typed, comparing it with each
// id, its MCP name and its own name: "" when none is near enough to be what was meant.
func nearestTool(typed string, ids []string) string {
	// One edit for a short word, up to three for a long one: "ad" may be "add", not "mul".
	most := min(3, max(1, len(typed)/4))
	best, bestD := "", most+1
	for _, id := range ids {
		_, name, _ := strings.Cut(id, ".")
		for _, form := range []string{id, toolname.Base(id), name} {
			if d := closest.Distance(typed, form); d < bestD {
				best, bestD = id, d
			}
		}
	}
	return best
}

// didYouMean is "; did you mean NAME?", or "" when there is no name.
func didYouMean(name string) string {
	if name == "" {
		return ""
	}
	return "; did you mean " + name + "?"
}

// unknownToolHint adds "did you mean" to a call's NOT_FOUND when a tool the caller may list
// is near the id it asked for; any other error, or a failed listing, leaves err as it is.
func (c *client) unknownToolHint(ctx context.Context, err error, id string) error {
	var ae *apiError
	if !errors.As(err, &ae) || ae.status != http.StatusNotFound {
		return err
	}
	ids, lerr := c.toolIDs(ctx)
	if lerr != nil {
		return err
	}
	if near := nearestTool(id, ids); near != "" && near != id {
		return fmt.Errorf("%w%s", err, didYouMean(near))
	}
	return err
}

// flagHint is " (did you mean --NAME?)" for the flag of fs nearest to the one err says is not
// defined, or "".
func flagHint(fs *flag.FlagSet, err error) string {
	typed, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if !ok {
		return ""
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	if near := closest.Name(strings.TrimLeft(typed, "-"), names, 2); near != "" {
		return " (did you mean --" + near + "?)"
	}
	return ""
}
