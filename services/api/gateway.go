package api

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/internal/auth"
	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/redact"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/services/api/mcpface"
	"github.com/toolmesh/toolmesh/services/api/openaiface"
	"github.com/toolmesh/toolmesh/services/api/ui"
)

//go:embed openapi.swagger.json
var openAPI []byte

// Gateway is the REST front of the api. It calls the api's own gRPC server over loopback so
// REST and gRPC requests pass the same interceptors; opts are added to its client's options
// (the TLS of that port). The returned func closes its connection.
func (s *Service) Gateway(ctx context.Context, grpcAddr string, opts ...grpc.DialOption) (http.Handler, func(), error) {
	conn, err := grpc.NewClient(grpcAddr, slices.Concat(server.DialOptions(), opts, s.tel.GRPCDialOptions())...)
	if err != nil {
		return nil, nil, fmt.Errorf("gateway client: %w", err)
	}
	gw := runtime.NewServeMux(
		// A tool call's arguments and structured result pass through as JSON text (restjson.go).
		runtime.WithMarshalerOption(runtime.MIMEWildcard, restJSON{&runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitDefaultValues: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
		}}),
		runtime.WithRoutingErrorHandler(routingError),
		runtime.SetQueryParameterParser(&strictQuery{}),
		runtime.WithMetadata(s.guard.ForwardedMetadata),
		runtime.WithMetadata(s.trail.edgeMetadata),
		runtime.WithOutgoingHeaderMatcher(auth.OutgoingHeaderMatcher),
		runtime.WithErrorHandler(auth.GatewayErrorHandler(withTraceID(exhaustedStatus(runtime.DefaultHTTPErrorHandler)))),
	)
	if err := toolmeshv1.RegisterToolServiceHandlerClient(ctx, gw, toolmeshv1.NewToolServiceClient(conn)); err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("register tool gateway: %w", err)
	}
	if err := toolmeshv1.RegisterAgentServiceHandlerClient(ctx, gw, toolmeshv1.NewAgentServiceClient(conn)); err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("register agent gateway: %w", err)
	}
	if err := toolmeshv1.RegisterPromptServiceHandlerClient(ctx, gw, toolmeshv1.NewPromptServiceClient(conn)); err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("register prompt gateway: %w", err)
	}
	if err := toolmeshv1.RegisterResourceServiceHandlerClient(ctx, gw, toolmeshv1.NewResourceServiceClient(conn)); err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("register resource gateway: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	if s.metrics != nil {
		mux.Handle("GET /metrics", s.metrics)
	}
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openAPI)
	})
	mux.Handle("GET "+ui.Prefix, ui.Handler(ui.Config{JaegerURL: s.cfg.JaegerURL}))
	for _, p := range mcpface.Routes { // the MCP endpoints: /mcp, /mcp/search, /mcp/servers/S, /sse
		mux.Handle(p, s.mcp)
	}
	// OpenAI's wire format: /v1/chat/completions, /v1/models. Like the gateway, the face calls
	// the api's own gRPC server, so its requests pass the same token check and rate limit.
	face := openaiface.New(toolmeshv1.NewAgentServiceClient(conn), s.forwardMetadata, s.logger)
	for _, p := range openaiface.Routes {
		mux.Handle(p, face)
	}
	// Without these, another method on an operational path would fall through to the gateway's
	// catch-all and read as "no route" (404) rather than a wrong method (405).
	operational := []string{"/healthz", "/readyz", "/openapi.json", ui.Prefix}
	if s.metrics != nil {
		operational = append(operational, "/metrics")
	}
	for _, p := range operational {
		mux.HandleFunc(p, methodNotAllowed)
	}
	mux.Handle("/", gw)
	mux.Handle("GET /{$}", ui.RedirectBrowsers(gw))
	// The gateway parses a query only into a request that has fields; ListServersRequest has
	// none, so its check is here.
	mux.Handle("GET /v1/servers", noQuery(gw))
	// Every request but /healthz needs a token, checked before the body is read. The /v1/
	// routes go on through the gateway to the gRPC server, whose interceptor counts them
	// against the rate limit (once). The console's page and script load without a token
	// (ui.Public) so that it can ask for one, and so does an MCP endpoint's protected resource
	// metadata (mcpface.Public), which tells a client how to send one.
	healthz := auth.Paths("/healthz")
	h := s.guard.HTTP(checkBody(s.cfg.MaxBodyBytes, s.cfg.BodyTimeout, mux),
		func(r *http.Request) bool { return healthz(r) || ui.Public(r) || mcpface.Public(r) }, auth.Paths("/v1/"))
	h = mcpface.Challenge(h) // an MCP client's 401 names the endpoint's resource metadata
	// Before the token: no web page may use the browser's access to this port (foreign Host,
	// foreign Origin, a body that is not JSON). Any page may see that /healthz is up.
	h = s.web.Handler(h, healthz)
	// Probes and scrapes would drown the traces of real requests.
	h = s.tel.HTTPHandler(traceHeader(errorBodies(h)), "rest", s.cfg.HTTPAddr, auth.Paths("/healthz", "/readyz", "/metrics", "/ui/"))
	h = bodyDeadline(s.cfg.BodyTimeout, h)
	h = edge(h) // the audit trail's record of where each request came from
	return h, func() { _ = conn.Close() }, nil
}

// forwardMetadata is what a call the OpenAI face makes to the api's gRPC server carries, as the
// gateway's calls do: the client's Authorization, the mark that Guard.HTTP has checked the
// client, and the client's address (for reading in logs, not for trusting).
func (s *Service) forwardMetadata(r *http.Request) metadata.MD {
	md := metadata.MD{}
	if a := r.Header.Values("Authorization"); len(a) > 0 {
		md.Set("authorization", a...)
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		md.Set("x-forwarded-for", host)
	}
	return metadata.Join(md, s.guard.ForwardedMetadata(r.Context(), r), s.trail.edgeMetadata(r.Context(), r))
}

// readyz is 200 when the api can serve: the executor answers with its catalog and has given the
// api its servers' rules, the retriever's index is in step with that catalog (when one is
// configured) and, with
// --api.ready-needs-inference, the model answers; otherwise 503 saying what is not ready and why.
//
// An MCP server that is down does not make the api unready: every replica reads the same
// servers, so taking them out of their Service for it would refuse every request (the other
// servers' tools, the listings, the answer that says which server is down) and bring no server
// back. That holds when every server is down too: the mesh still answers, and the body, /v1/servers
// and toolmesh.mcp.sessions say what is down. A server still making its first connection does
// hold readiness (for at most --executor.connect-timeout, after which it is reported as down):
// until then the catalog is not filled, and a new replica would be sent questions it would
// answer without that server's tools.
//
// The body names only the servers the caller may list (policy.ListsServer, as /v1/servers), with
// their states and errors: a narrow token learns nothing of the others from it. A refused
// reload of the MCP server configuration is reported too; its error names any server, so only a
// caller that may list every tool reads it.
func (s *Service) readyz(w http.ResponseWriter, r *http.Request) {
	type notConnected struct {
		Name  string `json:"name"`
		State string `json:"state"`
		Error string `json:"error,omitempty"`
	}
	c := caller(r.Context(), nil)
	body := map[string]any{}
	ready := true
	list, err := s.tools.listServers(r.Context())
	if err != nil {
		ready = false
		body["executor"] = redact.Text(err.Error())
	}
	if why := s.tools.policy.Pending(); why != "" {
		// Without the servers' rules every call is refused: a replica that has not had them
		// from the executor (or whose executor sends none) takes no traffic.
		ready = false
		body["rules"] = why
	}
	servers := list.GetServers()
	if cs := list.GetConfig(); cs.GetLastReloadError() != "" {
		// A refused reload leaves the servers in use serving: the api stays ready (taking
		// every replica out of service for a bad ConfigMap would be worse), and says so.
		why := "the last reload was refused (its error is shown to a token that may list every tool)"
		if s.tools.policy.ListsAll(c) {
			why = cs.GetLastReloadError()
		}
		body["config"] = map[string]any{"generation": cs.GetGeneration(), "last_reload_error": why + "; the configuration in use is kept"}
	}
	connected, down := 0, []notConnected{}
	filling := false
	served := int32(0)
	for _, srv := range servers {
		served += srv.GetToolCount()
		st := srv.GetState()
		// A server that has not connected yet since the api started is still given its
		// chance, for --api.ready-server-grace: in compose or a pod the MCP servers start
		// beside the mesh, and a first attempt refused a moment too early says nothing.
		// A server waiting for someone to sign in (OAuth) waits for a person, not for time.
		starting := srv.GetConnectedAt() == nil && time.Since(s.started) < s.cfg.ReadyServerGrace && !srv.GetNeedsSignIn() &&
			st != toolmeshv1.ServerState_SERVER_STATE_READY && st != toolmeshv1.ServerState_SERVER_STATE_DEGRADED
		filling = filling || st == toolmeshv1.ServerState_SERVER_STATE_CONNECTING || starting
		if !s.tools.policy.ListsServer(c, srv.GetName()) {
			continue
		}
		// A degraded server is connected and its tools are callable.
		if st == toolmeshv1.ServerState_SERVER_STATE_READY || st == toolmeshv1.ServerState_SERVER_STATE_DEGRADED {
			connected++
			continue
		}
		down = append(down, notConnected{Name: srv.GetName(), State: st.String(), Error: srv.GetLastError()})
	}
	sort.Slice(down, func(i, j int) bool { return down[i].Name < down[j].Name })
	if err == nil {
		body["servers"] = map[string]any{"ready": connected, "not_connected": down}
	}
	if filling {
		// Which servers is in servers.not_connected, for a caller that may list them.
		ready = false
		body["catalog"] = "filling: an MCP server is making its first connection (for at most --executor.connect-timeout, or --api.ready-server-grace after the api started)"
	}
	if s.tools.retriever != nil {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RPCTimeout)
		st, err := s.tools.retriever.GetIndexStatus(ctx, &toolmeshv1.GetIndexStatusRequest{})
		cancel()
		switch {
		case err != nil:
			ready = false
			body["retriever"] = redact.Text(dependencyError(ctx, "retriever", s.cfg.RetrieverAddr, err).Error())
		case !st.GetReady():
			ready = false
			body["retriever"] = "index not ready: " + redact.Text(st.GetLastError())
		case err == nil && st.GetToolCount() != served:
			// The index lags the executor for a moment after a server connects or
			// changes its tools; a question asked then would miss them.
			ready = false
			msg := fmt.Sprintf("index catching up: %d of %d tools indexed", st.GetToolCount(), served)
			if e := st.GetLastError(); e != "" {
				// Without the cause a sync that keeps failing reads as one still under way.
				msg += "; last sync attempt: " + redact.Text(e)
			}
			body["retriever"] = msg
		default:
			body["indexed_tools"] = st.GetToolCount()
		}
	}
	if s.agent.inference != nil {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RPCTimeout)
		st, err := s.agent.inference.GetModelStatus(ctx, &toolmeshv1.GetModelStatusRequest{})
		cancel()
		model := map[string]any{}
		switch {
		case err != nil:
			model["ready"], model["error"] = false, redact.Text(dependencyError(ctx, "inference", s.cfg.InferenceAddr, err).Error())
		default:
			model["ready"], model["backend_url"], model["model"] = st.GetReady(), redact.Text(st.GetBackendUrl()), st.GetModel()
			if !st.GetReady() {
				model["error"] = redact.Text(st.GetMessage()) + "; questions get 503 until it answers (tool search and direct calls work)"
				if st.GetFix() != "" {
					model["fix"] = redact.Text(st.GetFix())
				}
			}
		}
		body["inference"] = model
		if model["ready"] == false && s.cfg.ReadyNeedsInference {
			ready = false
		}
	}
	if !ready {
		body["status"] = "not ready"
		writeJSON(w, http.StatusServiceUnavailable, body)
		return
	}
	body["status"] = "ready"
	writeJSON(w, http.StatusOK, body)
}

// routingError names the path that matched no route; other routing errors keep the gateway's mapping.
func routingError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, code int) {
	switch code {
	case http.StatusNotFound:
		err := status.Errorf(codes.NotFound, "no route for %s %s", r.Method, r.URL.Path)
		runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
		return
	case http.StatusMethodNotAllowed:
		// The gateway would answer 501 (Unimplemented): the route exists, the method does not.
		writeJSON(w, http.StatusMethodNotAllowed, map[string]any{"code": codes.Unimplemented,
			"message": fmt.Sprintf("Method Not Allowed: %s is not a method of %s", r.Method, r.URL.Path), "details": []any{}})
		return
	}
	runtime.DefaultRoutingErrorHandler(ctx, mux, m, w, r, code)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// traceHeader names the request's trace in an X-Trace-Id response header, so any answer,
// an error included, can be looked up in Jaeger.
func traceHeader(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sc := trace.SpanContextFromContext(r.Context()); sc.HasTraceID() {
			w.Header().Set("X-Trace-Id", sc.TraceID().String())
		}
		next.ServeHTTP(w, r)
	})
}

// withTraceID adds the request's trace_id to the gateway's JSON error body.
func withTraceID(next runtime.ErrorHandlerFunc) runtime.ErrorHandlerFunc {
	return func(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
		sc := trace.SpanContextFromContext(r.Context())
		if !sc.HasTraceID() {
			next(ctx, mux, m, w, r, err)
			return
		}
		buf := &bufferedWriter{ResponseWriter: w}
		next(ctx, mux, m, buf, r, err)
		body := buf.body.Bytes()
		var fields map[string]json.RawMessage
		if json.Unmarshal(body, &fields) == nil {
			id, _ := json.Marshal(sc.TraceID().String())
			fields["trace_id"] = id
			if b, err := json.Marshal(fields); err == nil {
				body = b
			}
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(buf.code)
		_, _ = w.Write(body)
	}
}

// bufferedWriter holds an error response back so its body can be amended.
type bufferedWriter struct {
	http.ResponseWriter
	code int
	body bytes.Buffer
}

func (b *bufferedWriter) WriteHeader(code int) { b.code = code }

func (b *bufferedWriter) Write(p []byte) (int, error) {
	if b.code == 0 {
		b.code = http.StatusOK
	}
	return b.body.Write(p)
}

// methodNotAllowed answers a method an operational path does not serve.
func methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Allow", "GET, HEAD")
	writeJSON(w, http.StatusMethodNotAllowed, map[string]any{"code": codes.Unimplemented,
		"message": fmt.Sprintf("Method Not Allowed: %s is not a method of %s (GET is)", r.Method, r.URL.Path), "details": []any{}})
}

// exhaustedStatus answers the RESOURCE_EXHAUSTED that are no rate limit with a status that
// does not tell a client to wait and retry, as the gateway's 429 would: a retry gets the same
// answer. An oversized tool result is the server's fault (502); a conversation that does not
// fit the model's context is the request's (400).
func exhaustedStatus(next runtime.ErrorHandlerFunc) runtime.ErrorHandlerFunc {
	return func(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
		switch errreason.Of(err) {
		case errreason.ToolResultTooLarge:
			w = fixedStatus{ResponseWriter: w, code: http.StatusBadGateway}
		case errreason.ContextTooLong:
			w = fixedStatus{ResponseWriter: w, code: http.StatusBadRequest}
		}
		next(ctx, mux, m, w, r, err)
	}
}

// fixedStatus writes code whatever status its caller asks for.
type fixedStatus struct {
	http.ResponseWriter
	code int
}

func (f fixedStatus) WriteHeader(int) { f.ResponseWriter.WriteHeader(f.code) }

// Unwrap lets http.ResponseController reach the real writer.
func (f fixedStatus) Unwrap() http.ResponseWriter { return f.ResponseWriter }
