package mcpface

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/auth"
	"github.com/toolmesh/toolmesh/internal/policy"
	"github.com/toolmesh/toolmesh/internal/toolid/toolname"
)

// The MCP servers' prompts and resources are served by the catalog view (/mcp, the legacy
// /sse too) and each server's view: prompts under the tools' names (SERVER__NAME on /mcp,
// their own on /mcp/servers/SERVER), resources and templates under the URIs their servers give
// them, with the server in _meta (MetaServer). The face keeps the executor's lists (every
// prompt and resource the servers' rules let exist) in the views' mcp-go servers, listed again
// when the executor says a server's lists changed, and mcp-go tells the clients
// (notifications/prompts/list_changed, notifications/resources/list_changed). What a caller
// sees is cut to the servers its token reaches (policy.ServerContext) at each listing; a get
// or a read goes through the api's prompts handler (ContextAPI), which asks the policy again,
// as a REST request does.

// MetaServer is the key of a prompt's, resource's or template's _meta that holds its server.
const MetaServer = "toolmesh/server"

// ContextAPI is the api's prompts and resources handler, called in-process with the caller's
// token name in the context (auth.Name): the same code and policy as a REST or gRPC request.
type ContextAPI interface {
	GetPrompt(ctx context.Context, req *toolmeshv1.GetPromptRequest) (*toolmeshv1.GetPromptResponse, error)
	ReadResource(ctx context.Context, req *toolmeshv1.ReadResourceRequest) (*toolmeshv1.ReadResourceResponse, error)
}

// ContextExecutor is the part of the executor the face lists prompts and resources from.
type ContextExecutor interface {
	ListPrompts(ctx context.Context, in *toolmeshv1.ExecutorServiceListPromptsRequest, opts ...grpc.CallOption) (*toolmeshv1.ExecutorServiceListPromptsResponse, error)
	ListResources(ctx context.Context, in *toolmeshv1.ExecutorServiceListResourcesRequest, opts ...grpc.CallOption) (*toolmeshv1.ExecutorServiceListResourcesResponse, error)
	ListResourceTemplates(ctx context.Context, in *toolmeshv1.ExecutorServiceListResourceTemplatesRequest, opts ...grpc.CallOption) (*toolmeshv1.ExecutorServiceListResourceTemplatesResponse, error)
	WatchListChanged(ctx context.Context, in *toolmeshv1.WatchListChangedRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[toolmeshv1.WatchListChangedResponse], error)
}

// ServeContext makes the face serve the MCP servers' prompts and resources: listed from exec,
// got and read through api. Call it before Run; without it the views serve none.
func (f *Face) ServeContext(api ContextAPI, exec ContextExecutor) {
	f.ctxAPI, f.ctxExec = api, exec
}

// contextLists is one listing of the executor's prompts, resources and templates.
type contextLists struct {
	prompts   []*toolmeshv1.Prompt
	resources []*toolmeshv1.Resource
	templates []*toolmeshv1.ResourceTemplate
}

// followContext keeps the views' prompts and resources in step with the executor's until ctx
// ends: it lists them when it subscribes to WatchListChanged and again after each change
// (ListChangedDelay after the first of a burst).
func (f *Face) followContext(ctx context.Context) {
	if f.ctxExec == nil {
		return
	}
	backoff := 100 * time.Millisecond
	for {
		start := time.Now()
		err := f.watchContext(ctx)
		if ctx.Err() != nil {
			return
		}
		if status.Code(err) == codes.Unimplemented {
			// An executor from before prompts and resources: list once, there is nothing to follow.
			f.syncContext(ctx)
			return
		}
		if time.Since(start) > time.Minute {
			backoff = 100 * time.Millisecond
		}
		f.log.Warn("mcp: following the executor's prompts and resources stopped; subscribing again", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff/2 + rand.N(backoff/2+1)):
		}
		backoff = min(backoff*2, resyncBackoffMax)
	}
}

// watchContext runs one WatchListChanged subscription until it fails.
func (f *Face) watchContext(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := f.ctxExec.WatchListChanged(ctx, &toolmeshv1.WatchListChangedRequest{})
	if err != nil {
		return err
	}
	changed := make(chan struct{}, 1)
	errc := make(chan error, 1)
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				errc <- err
				return
			}
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	}()
	// The first listing races the subscription's first event harmlessly: a change between
	// them is listed again.
	f.syncContext(ctx)
	for {
		select {
		case err := <-errc:
			return err
		case <-changed:
		}
		if f.cfg.ListChangedDelay > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(f.cfg.ListChangedDelay):
			}
		}
		select {
		case <-changed: // covered by this listing
		default:
		}
		f.syncContext(ctx)
	}
}

// syncContext lists the executor's prompts and resources and gives them to the views. A list
// that fails keeps what the views have.
func (f *Face) syncContext(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.RPCTimeout)
	defer cancel()
	var l contextLists
	ps, err := f.ctxExec.ListPrompts(ctx, &toolmeshv1.ExecutorServiceListPromptsRequest{})
	if err == nil {
		l.prompts = ps.GetPrompts()
		var rs *toolmeshv1.ExecutorServiceListResourcesResponse
		if rs, err = f.ctxExec.ListResources(ctx, &toolmeshv1.ExecutorServiceListResourcesRequest{}); err == nil {
			l.resources = rs.GetResources()
			var ts *toolmeshv1.ExecutorServiceListResourceTemplatesResponse
			if ts, err = f.ctxExec.ListResourceTemplates(ctx, &toolmeshv1.ExecutorServiceListResourceTemplatesRequest{}); err == nil {
				l.templates = ts.GetResourceTemplates()
			}
		}
	}
	if err != nil {
		if status.Code(err) != codes.Unimplemented && ctx.Err() == nil {
			f.log.Warn("mcp: listing the executor's prompts and resources failed; keeping the last lists", "err", err)
		}
		return
	}
	f.ctxMu.Lock()
	f.ctxLists = &l
	f.ctxMu.Unlock()
	// Views are filled one at a time (under ctxMu), each with the lists it was filled from
	// last compared, so a view made meanwhile (serverViewFor) is filled by one or the other.
	for _, v := range f.views() {
		switch v.kind {
		case viewCatalog, viewServer:
			f.fillContext(v, &l)
		}
	}
}

// fillContext gives v the prompts, resources and templates of l it serves: all of them on the
// catalog, its server's on a server's view. mcp-go tells v's clients when they change.
func (f *Face) fillContext(v *view, l *contextLists) {
	if l == nil || f.ctxAPI == nil || !f.ctxFiltered.Load() {
		return // nothing is served unfiltered by the caller's token
	}
	mine := func(server string) bool { return v.kind == viewCatalog || server == v.server }
	var ids []string
	for _, p := range l.prompts {
		if mine(p.GetServer()) {
			ids = append(ids, p.GetId())
		}
	}
	names := toolname.New(ids...) // SERVER__NAME, as tools are named
	h := sha256.New()
	var prompts []server.ServerPrompt
	for _, p := range l.prompts {
		if !mine(p.GetServer()) {
			continue
		}
		name := p.GetName()
		if v.kind == viewCatalog {
			name = names.Name(p.GetId())
		}
		mp := mcp.Prompt{Name: name, Title: p.GetTitle(), Description: p.GetDescription(),
			Meta: &mcp.Meta{AdditionalFields: map[string]any{MetaID: p.GetId(), MetaServer: p.GetServer()}}}
		for _, a := range p.GetArguments() {
			mp.Arguments = append(mp.Arguments, mcp.PromptArgument{Name: a.GetName(), Title: a.GetTitle(), Description: a.GetDescription(), Required: a.GetRequired()})
		}
		prompts = append(prompts, server.ServerPrompt{Prompt: mp, Handler: f.promptHandler(p.GetServer(), p.GetName())})
		fmt.Fprintf(h, "p\x00%s\x00%s\x00%s\x00%s\x00%v\n", name, p.GetId(), p.GetTitle(), p.GetDescription(), p.GetArguments())
	}
	var resources []server.ServerResource
	seen := map[string]string{}
	for _, r := range l.resources {
		if !mine(r.GetServer()) {
			continue
		}
		if other, dup := seen[r.GetUri()]; dup {
			// One URI, two servers: the catalog serves the first; /mcp/servers/SERVER both.
			f.log.Warn("mcp: two servers list the same resource URI; /mcp serves the first", "uri", r.GetUri(), "server", other, "also", r.GetServer())
			continue
		}
		seen[r.GetUri()] = r.GetServer()
		mr := mcp.Resource{URI: r.GetUri(), Name: r.GetName(), Title: r.GetTitle(), Description: r.GetDescription(), MIMEType: r.GetMimeType(),
			Meta: &mcp.Meta{AdditionalFields: map[string]any{MetaServer: r.GetServer()}}}
		if r.Size != nil {
			mr.Size = r.Size
		}
		resources = append(resources, server.ServerResource{Resource: mr, Handler: f.readHandler(r.GetServer())})
		fmt.Fprintf(h, "r\x00%s\x00%s\x00%s\x00%s\x00%s\x00%s\n", r.GetServer(), r.GetUri(), r.GetName(), r.GetTitle(), r.GetDescription(), r.GetMimeType())
	}
	var templates []server.ServerResourceTemplate
	for _, t := range l.templates {
		if !mine(t.GetServer()) {
			continue
		}
		mt := mcp.NewResourceTemplate(t.GetUriTemplate(), t.GetName(), mcp.WithTemplateDescription(t.GetDescription()), mcp.WithTemplateMIMEType(t.GetMimeType()))
		if mt.URITemplate == nil || mt.URITemplate.Template == nil {
			continue // not an RFC 6570 template mcp-go can match
		}
		mt.Title = t.GetTitle()
		mt.Meta = &mcp.Meta{AdditionalFields: map[string]any{MetaServer: t.GetServer()}}
		read := f.readHandler(t.GetServer())
		templates = append(templates, server.ServerResourceTemplate{Template: mt, Handler: func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return read(ctx, req)
		}})
		fmt.Fprintf(h, "t\x00%s\x00%s\x00%s\x00%s\n", t.GetServer(), t.GetUriTemplate(), t.GetName(), t.GetDescription())
	}
	var fp [sha256.Size]byte
	h.Sum(fp[:0])
	f.ctxMu.Lock()
	defer f.ctxMu.Unlock()
	if fp == f.ctxSet[v] {
		return
	}
	f.ctxSet[v] = fp
	v.mcp.SetPrompts(prompts...)
	v.mcp.SetResources(resources...)
	v.mcp.SetResourceTemplates(templates...)
}

// promptHandler gets server's prompt name through the api.
func (f *Face) promptHandler(srv, name string) server.PromptHandlerFunc {
	return func(ctx context.Context, req mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		resp, err := f.ctxAPI.GetPrompt(ctx, &toolmeshv1.GetPromptRequest{Server: srv, Name: name, Arguments: req.Params.Arguments})
		if err != nil {
			return nil, contextFailure(err)
		}
		out := &mcp.GetPromptResult{Description: resp.GetDescription(), Messages: make([]mcp.PromptMessage, 0, len(resp.GetMessages()))}
		for _, m := range resp.GetMessages() {
			out.Messages = append(out.Messages, mcp.PromptMessage{Role: mcp.Role(m.GetRole()), Content: contentOf(m.GetContent())})
		}
		return out, nil
	}
}

// readHandler reads a resource of srv through the api.
func (f *Face) readHandler(srv string) server.ResourceHandlerFunc {
	return func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		resp, err := f.ctxAPI.ReadResource(ctx, &toolmeshv1.ReadResourceRequest{Server: srv, Uri: req.Params.URI})
		if err != nil {
			return nil, contextFailure(err)
		}
		out := make([]mcp.ResourceContents, 0, len(resp.GetContents()))
		for _, c := range resp.GetContents() {
			if c.Blob != nil {
				out = append(out, mcp.BlobResourceContents{URI: c.GetUri(), MIMEType: c.GetMimeType(), Blob: base64.StdEncoding.EncodeToString(c.GetBlob())})
				continue
			}
			out = append(out, mcp.TextResourceContents{URI: c.GetUri(), MIMEType: c.GetMimeType(), Text: c.GetText()})
		}
		return out, nil
	}
}

// contextFailure is the JSON-RPC error of a refused get or read: the api's words (they name
// the limit of an oversized resource, or the rule), a resource not found as MCP's own code.
func contextFailure(err error) error {
	st := status.Convert(err)
	if st.Code() == codes.NotFound {
		return fmt.Errorf("%s: %w", st.Message(), server.ErrResourceNotFound)
	}
	return errors.New(st.Message())
}

// contextFilters are the view's filters of prompts, resources and templates by the caller's
// token: what it may not see is left out as if it did not exist.
func (f *Face) contextFilters(hooks *server.Hooks) server.ServerOption {
	f.ctxFiltered.Store(true)
	hooks.AddAfterListResources(func(ctx context.Context, _ any, _ *mcp.ListResourcesRequest, res *mcp.ListResourcesResult) {
		if res != nil {
			res.Resources = slices.DeleteFunc(res.Resources, func(r mcp.Resource) bool { return !f.sees(ctx, r.Meta) })
		}
	})
	hooks.AddAfterListResourceTemplates(func(ctx context.Context, _ any, _ *mcp.ListResourceTemplatesRequest, res *mcp.ListResourceTemplatesResult) {
		if res != nil {
			res.ResourceTemplates = slices.DeleteFunc(res.ResourceTemplates, func(t mcp.ResourceTemplate) bool { return !f.sees(ctx, t.Meta) })
		}
	})
	return server.WithPromptFilter(func(ctx context.Context, ps []mcp.Prompt) []mcp.Prompt {
		if !f.policy.Scoped() {
			return ps
		}
		return slices.DeleteFunc(slices.Clone(ps), func(p mcp.Prompt) bool { return !f.sees(ctx, p.Meta) })
	})
}

// sees reports whether the caller in ctx may list the prompts and resources of the server meta
// names.
func (f *Face) sees(ctx context.Context, meta *mcp.Meta) bool {
	if !f.policy.Scoped() {
		return true
	}
	var srv string
	if meta != nil {
		srv, _ = meta.AdditionalFields[MetaServer].(string)
	}
	return f.policy.ServerContext(policy.Caller{Token: auth.Name(ctx)}, policy.List, srv) == nil
}
