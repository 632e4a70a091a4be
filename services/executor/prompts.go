package executor

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/toolid"
)

// Prompts and resources go to the server as they are asked for, through the session's
// current connection, held to its timeout, its concurrency limit and the answer limits tools
// are held to: a listing to executor.max-list-bytes and executor.max-tools-per-server entries,
// a resource read to the server's result limit (maxResultBytes). The servers' allowedPrompts,
// excludedPrompts, allowedResources and excludedResources decide which exist: one they leave
// out is neither listed nor got, and asking for it is NOT_FOUND as for one the server lacks, so
// a caller learns nothing of what the operator hides. Nothing is cached: a client asks for
// these lists far less often than the model is offered tools, and a server's own answer is
// never stale.

// notFoundError is a prompt or resource that does not exist for toolmesh.
type notFoundError struct{ what string }

func (e *notFoundError) Error() string { return e.what + " not found" }

// ListPrompts lists the prompts of one server or all.
func (s *Service) ListPrompts(ctx context.Context, req *toolmeshv1.ExecutorServiceListPromptsRequest) (*toolmeshv1.ExecutorServiceListPromptsResponse, error) {
	prompts, errs, err := eachServer(ctx, s, req.GetServer(), (*toolmeshv1.Prompt).GetId, func(ctx context.Context, sess *session) ([]*toolmeshv1.Prompt, error) {
		ps, err := sess.listPrompts(ctx)
		var out []*toolmeshv1.Prompt
		for _, p := range ps {
			if s.cat.rules.Load().PromptExists(sess.name, p.Name) == nil {
				out = append(out, promptToProto(sess.name, p))
			}
		}
		return out, err
	})
	if err != nil {
		return nil, err
	}
	return &toolmeshv1.ExecutorServiceListPromptsResponse{Prompts: prompts, Errors: errs}, nil
}

// GetPrompt fills in one prompt.
func (s *Service) GetPrompt(ctx context.Context, req *toolmeshv1.ExecutorServiceGetPromptRequest) (*toolmeshv1.ExecutorServiceGetPromptResponse, error) {
	server, name := req.GetServer(), req.GetName()
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "name: the prompt's name is required")
	}
	sess := s.enter(server)
	if sess == nil {
		return nil, status.Errorf(codes.NotFound, "unknown server %q", server)
	}
	defer sess.leave()
	if s.cat.rules.Load().PromptExists(server, name) != nil {
		return nil, contextStatus(&notFoundError{what: fmt.Sprintf("prompt %q of server %q", name, server)})
	}
	limit, _ := sess.resourceLimit()
	var res *mcp.GetPromptResult
	err := sess.request(ctx, string(mcp.MethodPromptsGet), limit, func(ctx context.Context, c *client.Client) error {
		r := mcp.GetPromptRequest{}
		r.Params.Name = name
		r.Params.Arguments = req.GetArguments()
		var err error
		res, err = c.GetPrompt(ctx, r)
		return err
	})
	if err != nil {
		return nil, contextStatus(err)
	}
	out := &toolmeshv1.ExecutorServiceGetPromptResponse{Description: res.Description}
	for _, m := range res.Messages {
		out.Messages = append(out.Messages, &toolmeshv1.PromptMessage{Role: string(m.Role), Content: contentToProto(m.Content)})
	}
	return out, nil
}

// ListResources lists the resources of one server or all.
func (s *Service) ListResources(ctx context.Context, req *toolmeshv1.ExecutorServiceListResourcesRequest) (*toolmeshv1.ExecutorServiceListResourcesResponse, error) {
	resources, errs, err := eachServer(ctx, s, req.GetServer(), func(r *toolmeshv1.Resource) string { return r.GetServer() + " " + r.GetUri() }, func(ctx context.Context, sess *session) ([]*toolmeshv1.Resource, error) {
		rs, err := sess.listResources(ctx)
		var out []*toolmeshv1.Resource
		for _, r := range rs {
			if s.cat.rules.Load().ResourceExists(sess.name, r.URI) == nil {
				out = append(out, &toolmeshv1.Resource{Server: sess.name, Uri: r.URI, Name: r.Name, Title: r.Title,
					Description: r.Description, MimeType: r.MIMEType, Size: r.Size})
			}
		}
		return out, err
	})
	if err != nil {
		return nil, err
	}
	return &toolmeshv1.ExecutorServiceListResourcesResponse{Resources: resources, Errors: errs}, nil
}

// ListResourceTemplates lists the resource templates of one server or all.
func (s *Service) ListResourceTemplates(ctx context.Context, req *toolmeshv1.ExecutorServiceListResourceTemplatesRequest) (*toolmeshv1.ExecutorServiceListResourceTemplatesResponse, error) {
	templates, errs, err := eachServer(ctx, s, req.GetServer(), func(t *toolmeshv1.ResourceTemplate) string { return t.GetServer() + " " + t.GetUriTemplate() }, func(ctx context.Context, sess *session) ([]*toolmeshv1.ResourceTemplate, error) {
		ts, err := sess.listTemplates(ctx)
		var out []*toolmeshv1.ResourceTemplate
		for _, t := range ts {
			raw := ""
			if t.URITemplate != nil && t.URITemplate.Template != nil {
				raw = t.URITemplate.Raw()
			}
			if raw != "" && s.cat.rules.Load().ResourceExists(sess.name, raw) == nil {
				out = append(out, &toolmeshv1.ResourceTemplate{Server: sess.name, UriTemplate: raw, Name: t.Name,
					Title: t.Title, Description: t.Description, MimeType: t.MIMEType})
			}
		}
		return out, err
	})
	if err != nil {
		return nil, err
	}
	return &toolmeshv1.ExecutorServiceListResourceTemplatesResponse{ResourceTemplates: templates, Errors: errs}, nil
}

// ReadResource reads one resource, within the server's result limit.
func (s *Service) ReadResource(ctx context.Context, req *toolmeshv1.ExecutorServiceReadResourceRequest) (*toolmeshv1.ExecutorServiceReadResourceResponse, error) {
	server, uri := req.GetServer(), req.GetUri()
	if uri == "" {
		return nil, status.Error(codes.InvalidArgument, "uri: the resource's URI is required")
	}
	sess := s.enter(server)
	if sess == nil {
		return nil, status.Errorf(codes.NotFound, "unknown server %q", server)
	}
	defer sess.leave()
	if s.cat.rules.Load().ResourceExists(server, uri) != nil {
		return nil, contextStatus(&notFoundError{what: fmt.Sprintf("resource %q of server %q", uri, server)})
	}
	limit, source := sess.resourceLimit()
	var res *mcp.ReadResourceResult
	err := sess.request(ctx, string(mcp.MethodResourcesRead), limit, func(ctx context.Context, c *client.Client) error {
		r := mcp.ReadResourceRequest{}
		r.Params.URI = uri
		var err error
		res, err = c.ReadResource(ctx, r)
		return err
	})
	var tl *resultTooLargeError
	if errors.As(err, &tl) {
		return nil, resourceTooLarge(server, uri, tl.size, tl.over, limit, source)
	}
	if err != nil {
		return nil, contextStatus(err)
	}
	out := &toolmeshv1.ExecutorServiceReadResourceResponse{}
	size := 0
	for _, c := range res.Contents {
		pc := resourceContentsToProto(c)
		size += len(pc.GetText()) + len(pc.GetBlob())
		out.Contents = append(out.Contents, pc)
	}
	// The wire limit reads an answer up to the limit; a stdio line may be longer (its own
	// limit is the largest of the executor's), so the contents are measured too.
	if size > limit {
		return nil, resourceTooLarge(server, uri, int64(size), false, limit, source)
	}
	return out, nil
}

// resourceLimit is the bound on a resource read (or a prompt got) from s and the setting it
// comes from: the server's maxResultBytes, else executor.max-result-bytes.
func (s *session) resourceLimit() (int, string) {
	if s.srv.MaxResultBytes > 0 {
		return s.srv.MaxResultBytes, fmt.Sprintf("mcpServers.%s.maxResultBytes", s.name)
	}
	return s.cfg.MaxResultBytes, "executor.max-result-bytes"
}

func resourceTooLarge(server, uri string, size int64, over bool, limit int, source string) error {
	n := fmt.Sprintf("%d bytes", size)
	if over {
		n = fmt.Sprintf("more than %d bytes", size)
	}
	return errreason.Error(codes.ResourceExhausted, errreason.ToolResultTooLarge,
		fmt.Sprintf("resource %q of server %q is %s, over the %d-byte limit (%s); raise that setting to read it", uri, server, n, limit, source))
}

// eachServer runs list on one server (name) or on every ready server at once, and gathers
// what they list, sorted by key. A server that fails is left out and its error given by name;
// with one server named, its failure is the answer.
func eachServer[T any](ctx context.Context, s *Service, name string, key func(T) string, list func(context.Context, *session) ([]T, error)) ([]T, map[string]string, error) {
	set := s.set.Load()
	sessions := set.list()
	if name != "" {
		sess, ok := set.sessions[name]
		if !ok {
			return nil, nil, status.Errorf(codes.NotFound, "unknown server %q", name)
		}
		sessions = []*session{sess}
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		out  []T
		errs = map[string]error{}
	)
	for _, sess := range sessions {
		if ok, _ := sess.ready(); !ok && name == "" {
			continue // ListServers says why
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !sess.enter() {
				return // retired by a reload: its successor lists next time
			}
			defer sess.leave()
			items, err := list(ctx, sess)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[sess.name] = err
				return
			}
			out = append(out, items...)
		}()
	}
	wg.Wait()
	if err, ok := errs[name]; ok && name != "" {
		return nil, nil, contextStatus(err)
	}
	slices.SortFunc(out, func(a, b T) int { return strings.Compare(key(a), key(b)) })
	var msgs map[string]string
	for srv, err := range errs {
		if msgs == nil {
			msgs = map[string]string{}
		}
		msgs[srv] = status.Convert(contextStatus(err)).Message()
	}
	return out, msgs, nil
}

// request runs one request (fn) of method on the current connection, as a tools/call is run:
// within the session's timeout and concurrency limit, with its span and metric, the answer
// read up to limit bytes. Its errors are the executor's (a *resultTooLargeError over the limit,
// a *timeoutError, an *unavailableError, a *ServerError for the server's own refusal).
func (s *session) request(ctx context.Context, method string, limit int, fn func(context.Context, *client.Client) error) (err error) {
	parent := ctx
	ctx, rc := s.startRPC(ctx, method, "")
	defer func() { rc.end(ctx, nil, err) }()
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	ctxErr := func() error {
		if parent.Err() != nil {
			return parent.Err()
		}
		return &timeoutError{tool: s.name + " " + method, timeout: s.timeout}
	}
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return ctxErr()
	}
	defer func() { <-s.sem }()
	cn, err := s.current(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return ctxErr()
		}
		return err
	}
	rc.connected(cn)
	ctx, probe := withAnswerProbe(ctx, limit)
	err = fn(ctx, cn.client)
	if err == nil {
		return nil
	}
	if err := probe.err(method); err != nil {
		return err
	}
	if ctxEnded(ctx) {
		return ctxErr()
	}
	if errors.Is(err, transport.ErrSessionTerminated) {
		s.markBroken(cn, ErrSessionExpired, true)
		return &unavailableError{server: s.name, reason: "mcp session expired"}
	}
	var te *transport.Error
	if !errors.As(err, &te) {
		return &ServerError{Server: s.name, Err: err}
	}
	if probe.brokenBy(err) || cn.isBroken() {
		s.markBroken(cn, err, false)
	}
	return &unavailableError{server: s.name, reason: shorten(err.Error(), maxReason)}
}

// listPages lists every page of one kind, within the listing limits: at most
// executor.max-tools-per-server entries and executor.max-list-bytes a page.
// A server whose capabilities do not announce the kind (has) lists none, without asking.
func listPages[T any](ctx context.Context, s *session, method string, has func(mcp.ServerCapabilities) bool, page func(context.Context, *client.Client, mcp.Cursor) ([]T, mcp.Cursor, error)) ([]T, error) {
	var out []T
	err := s.request(ctx, method, s.cfg.MaxListBytes, func(ctx context.Context, c *client.Client) error {
		if !has(c.GetServerCapabilities()) {
			return nil
		}
		var cursor mcp.Cursor
		seen := map[mcp.Cursor]bool{}
		for {
			items, next, err := page(ctx, c, cursor)
			if err != nil {
				return err
			}
			out = append(out, items...)
			if len(out) > s.cfg.MaxToolsPerServer {
				return fmt.Errorf("%s: more than %d entries (executor.max-tools-per-server)", method, s.cfg.MaxToolsPerServer)
			}
			if next == "" {
				return nil
			}
			if seen[next] {
				return fmt.Errorf("%s: the server sent cursor %q twice", method, shorten(string(next), 64))
			}
			seen[next], cursor = true, next
		}
	})
	return out, err
}

func hasPrompts(c mcp.ServerCapabilities) bool   { return c.Prompts != nil }
func hasResources(c mcp.ServerCapabilities) bool { return c.Resources != nil }

func (s *session) listPrompts(ctx context.Context) ([]mcp.Prompt, error) {
	return listPages(ctx, s, string(mcp.MethodPromptsList), hasPrompts, func(ctx context.Context, c *client.Client, cur mcp.Cursor) ([]mcp.Prompt, mcp.Cursor, error) {
		r := mcp.ListPromptsRequest{}
		r.Params.Cursor = cur
		res, err := c.ListPromptsByPage(ctx, r)
		if err != nil {
			return nil, "", err
		}
		return res.Prompts, res.NextCursor, nil
	})
}

func (s *session) listResources(ctx context.Context) ([]mcp.Resource, error) {
	return listPages(ctx, s, string(mcp.MethodResourcesList), hasResources, func(ctx context.Context, c *client.Client, cur mcp.Cursor) ([]mcp.Resource, mcp.Cursor, error) {
		r := mcp.ListResourcesRequest{}
		r.Params.Cursor = cur
		res, err := c.ListResourcesByPage(ctx, r)
		if err != nil {
			return nil, "", err
		}
		return res.Resources, res.NextCursor, nil
	})
}

func (s *session) listTemplates(ctx context.Context) ([]mcp.ResourceTemplate, error) {
	return listPages(ctx, s, string(mcp.MethodResourcesTemplatesList), hasResources, func(ctx context.Context, c *client.Client, cur mcp.Cursor) ([]mcp.ResourceTemplate, mcp.Cursor, error) {
		r := mcp.ListResourceTemplatesRequest{}
		r.Params.Cursor = cur
		res, err := c.ListResourceTemplatesByPage(ctx, r)
		if err != nil {
			return nil, "", err
		}
		return res.ResourceTemplates, res.NextCursor, nil
	})
}

// contextStatus maps the errors of prompts and resources to gRPC statuses: a prompt or
// resource that does not exist is NOT_FOUND, a server without prompts or resources (method not
// found) is an empty answer's cause, UNIMPLEMENTED; the rest as for tools.
func contextStatus(err error) error {
	var nf *notFoundError
	if errors.As(err, &nf) {
		return status.Error(codes.NotFound, nf.Error())
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var se *ServerError
	if errors.As(err, &se) && errors.Is(err, mcp.ErrResourceNotFound) {
		return status.Error(codes.NotFound, err.Error())
	}
	return toStatus(err)
}

func promptToProto(server string, p mcp.Prompt) *toolmeshv1.Prompt {
	out := &toolmeshv1.Prompt{Id: toolid.Join(server, p.Name), Server: server, Name: p.Name, Title: p.Title, Description: p.Description}
	for _, a := range p.Arguments {
		out.Arguments = append(out.Arguments, &toolmeshv1.PromptArgument{Name: a.Name, Title: a.Title, Description: a.Description, Required: a.Required})
	}
	return out
}

func resourceContentsToProto(c mcp.ResourceContents) *toolmeshv1.ResourceContents {
	switch v := c.(type) {
	case mcp.TextResourceContents:
		return &toolmeshv1.ResourceContents{Uri: v.URI, MimeType: v.MIMEType, Text: &v.Text}
	case *mcp.TextResourceContents:
		return &toolmeshv1.ResourceContents{Uri: v.URI, MimeType: v.MIMEType, Text: &v.Text}
	case mcp.BlobResourceContents:
		return blobContents(v.URI, v.MIMEType, v.Blob)
	case *mcp.BlobResourceContents:
		return blobContents(v.URI, v.MIMEType, v.Blob)
	}
	return &toolmeshv1.ResourceContents{}
}

func blobContents(uri, mime, data string) *toolmeshv1.ResourceContents {
	out := &toolmeshv1.ResourceContents{Uri: uri, MimeType: mime}
	if b, err := base64.StdEncoding.DecodeString(data); err == nil {
		out.Blob = b
	} else {
		out.Blob = []byte{}
	}
	return out
}

// listChanges fans the servers' list_changed notifications out to the WatchListChanged
// streams. Each stream keeps a set of pending (server, kind) pairs, so a slow one is never
// waited for and holds at most two entries a server.
type listChanges struct {
	mu   sync.Mutex
	subs map[*changeSub]struct{}
}

type changeSub struct {
	mu      sync.Mutex
	pending map[changeKey]struct{}
	kick    chan struct{}
}

type changeKey struct {
	server string
	kind   toolmeshv1.ListKind
}

func (l *listChanges) subscribe() *changeSub {
	sub := &changeSub{pending: map[changeKey]struct{}{}, kick: make(chan struct{}, 1)}
	l.mu.Lock()
	if l.subs == nil {
		l.subs = map[*changeSub]struct{}{}
	}
	l.subs[sub] = struct{}{}
	l.mu.Unlock()
	return sub
}

func (l *listChanges) unsubscribe(sub *changeSub) {
	l.mu.Lock()
	delete(l.subs, sub)
	l.mu.Unlock()
}

// publish tells every stream that server's list of kind changed.
func (l *listChanges) publish(server string, kinds ...toolmeshv1.ListKind) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for sub := range l.subs {
		sub.mu.Lock()
		for _, k := range kinds {
			sub.pending[changeKey{server, k}] = struct{}{}
		}
		sub.mu.Unlock()
		select {
		case sub.kick <- struct{}{}:
		default:
		}
	}
}

func (sub *changeSub) take() []changeKey {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	out := make([]changeKey, 0, len(sub.pending))
	for k := range sub.pending {
		out = append(out, k)
	}
	clear(sub.pending)
	slices.SortFunc(out, func(a, b changeKey) int {
		if c := strings.Compare(a.server, b.server); c != 0 {
			return c
		}
		return int(a.kind - b.kind)
	})
	return out
}

// WatchListChanged sends each change of a server's prompts or resources as it happens.
func (s *Service) WatchListChanged(_ *toolmeshv1.WatchListChangedRequest, stream grpc.ServerStreamingServer[toolmeshv1.WatchListChangedResponse]) error {
	ctx := stream.Context()
	sub := s.cat.changes.subscribe()
	defer s.cat.changes.unsubscribe(sub)
	for {
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-s.stopped:
			return status.Error(codes.Unavailable, "executor stopped")
		case <-s.draining:
			return errreason.Error(codes.Unavailable, errreason.Stopping, "executor stopping")
		case <-sub.kick:
			for _, k := range sub.take() {
				if err := stream.Send(&toolmeshv1.WatchListChangedResponse{Server: k.server, Kind: k.kind}); err != nil {
					return err
				}
			}
		}
	}
}
