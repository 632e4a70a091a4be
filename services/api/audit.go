package api

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/internal/audit"
	"github.com/toolmesh/toolmesh/internal/auth"
	"github.com/toolmesh/toolmesh/internal/errreason"
	"github.com/toolmesh/toolmesh/internal/policy"
	"github.com/toolmesh/toolmesh/services/api/mcpface"
)

// auditor writes the audit trail (internal/audit's Recorder): a record per tool call, refused
// ones included. Ready is an error while a trail that fails closed cannot be written.
type auditor interface {
	Record(ctx context.Context, r audit.Record)
	Ready() error
}

// trail is the api's side of the audit trail: where records go, and the key that marks what
// the REST port tells the gRPC server about a request's client. With the trail off (on false)
// a call costs it nothing.
type trail struct {
	rec auditor
	key string
	on  bool
}

// seen is where a request came from as the api saw it: the address of the connection that
// reached the REST or gRPC port (which a client cannot choose), what X-Forwarded-For claimed
// (a proxy in front of the api, or the client itself: recorded, never believed) and the front.
type seen struct {
	client, forwardedFor, via string
}

type seenKey struct{}

// A REST request reaches the gRPC server through the gateway or the OpenAI face over
// loopback: where it came from travels in these metadata, with the trail's key, made per
// process, so that a gRPC client that sends them itself is not believed.
const (
	edgeKeyMD       = "x-toolmesh-edge"
	edgeClientMD    = "x-toolmesh-edge-client"
	edgeViaMD       = "x-toolmesh-edge-via"
	edgeForwardedMD = "x-toolmesh-edge-forwarded-for"
	maxForwardedFor = 256
)

// edge marks each request of the REST port with where it came from, for the MCP face (which
// calls in process) and edgeMetadata. (A client's own Grpc-Metadata-X-Toolmesh-Edge* headers
// do not reach the gRPC server: grpc-gateway's default header matcher forwards none.)
func edge(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sn := seen{client: r.RemoteAddr, forwardedFor: printable(strings.Join(r.Header.Values("X-Forwarded-For"), ", ")), via: viaOf(r.URL.Path)}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), seenKey{}, sn)))
	})
}

// viaOf names the front of a REST port path.
func viaOf(path string) string {
	switch {
	case path == mcpface.CatalogPath || strings.HasPrefix(path, mcpface.CatalogPath+"/") ||
		path == mcpface.SSEPath || strings.HasPrefix(path, mcpface.SSEPath+"/"):
		return "mcp"
	case strings.HasPrefix(path, "/v1/chat/"):
		return "chat"
	}
	return "rest"
}

// edgeMetadata is what a REST request forwarded to the gRPC server carries of where it came
// from (runtime.WithMetadata for the gateway; forwardMetadata for the OpenAI face).
func (t *trail) edgeMetadata(_ context.Context, r *http.Request) metadata.MD {
	sn, ok := r.Context().Value(seenKey{}).(seen)
	if !ok {
		return nil
	}
	return metadata.Pairs(edgeKeyMD, t.key, edgeClientMD, sn.client, edgeViaMD, sn.via, edgeForwardedMD, sn.forwardedFor)
}

// seenOf is where the request in ctx came from: the REST port's record of it (in process, or
// in metadata with the key), else the gRPC connection's peer.
func (t *trail) seenOf(ctx context.Context) seen {
	if !t.on {
		return seen{}
	}
	if sn, ok := ctx.Value(seenKey{}).(seen); ok {
		return sn
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if k := md.Get(edgeKeyMD); len(k) == 1 && subtle.ConstantTimeCompare([]byte(k[0]), []byte(t.key)) == 1 {
		c, v, f := md.Get(edgeClientMD), md.Get(edgeViaMD), md.Get(edgeForwardedMD)
		if len(c) == 1 && len(v) == 1 && len(f) == 1 {
			return seen{client: c[0], via: v[0], forwardedFor: f[0]}
		}
	}
	sn := seen{via: "grpc", forwardedFor: printable(strings.Join(md.Get("x-forwarded-for"), ", "))}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		sn.client = p.Addr.String()
	}
	return sn
}

// printable is s, bounded, with what cannot travel in gRPC metadata (anything but printable
// ASCII) replaced.
func printable(s string) string {
	if len(s) > maxForwardedFor {
		s = s[:maxForwardedFor]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return '?'
		}
		return r
	}, s)
}

// auditedCall is one tool call on its way to the trail.
type auditedCall struct {
	t     *trail
	rec   audit.Record
	start time.Time
}

// begin starts the record of a call of tool by origin, for the request in ctx that came from sn;
// nil (on which ready and end do nothing) when the trail is off.
func (t *trail) begin(ctx context.Context, sn seen, origin, tool string, args *structpb.Struct) *auditedCall {
	if !t.on {
		return nil
	}
	return &auditedCall{t: t, start: time.Now(), rec: audit.Record{Token: auth.Name(ctx), Client: sn.client,
		ForwardedFor: sn.forwardedFor, Via: sn.via, Origin: origin, Tool: tool, Arguments: args, Decision: audit.Allowed}}
}

// withJSON records the call's arguments as the JSON text it carried (when it did): the trail
// decodes it off the call's path.
func (c *auditedCall) withJSON(raw []byte) *auditedCall {
	if c != nil && raw != nil {
		c.rec.Arguments, c.rec.ArgumentsJSON = nil, raw
	}
	return c
}

// ready is nil when the call may go ahead; while a trail that fails closed cannot be written
// it is an UNAVAILABLE status (the call is not made).
func (c *auditedCall) ready() error {
	if c == nil {
		return nil
	}
	err := c.t.rec.Ready()
	if err == nil {
		return nil
	}
	c.rec.Rule = "audit.on-failure"
	return errreason.Error(codes.Unavailable, errreason.AuditUnavailable, err.Error())
}

// end writes the record: the result's size (as the executor returned it) and isError, or what
// refused or failed the call (a *policy.Denial of the api's, the executor's policy denial,
// another status).
func (c *auditedCall) end(ctx context.Context, result proto.Message, isError bool, err error) {
	if c == nil {
		return
	}
	c.rec.Duration = time.Since(c.start)
	c.rec.ResultBytes, c.rec.IsError = proto.Size(result), isError
	if err != nil {
		var d *policy.Denial
		var l *policy.Limited
		switch {
		case errors.As(err, &d):
			c.rec.Decision, c.rec.Rule = audit.Denied, string(d.Rule)
		case errors.As(err, &l):
			c.rec.Decision, c.rec.Rule = audit.Denied, string(policy.RuleRateLimit)
		case errreason.Of(err) == errreason.PolicyDenied:
			c.rec.Decision, c.rec.Rule = audit.Denied, errreason.Info(err).GetMetadata()["rule"]
		case c.rec.Rule != "": // ready refused it
			c.rec.Decision = audit.Denied
		default:
			c.rec.Status = status.Code(err).String()
		}
	}
	c.t.rec.Record(ctx, c.rec)
}

// refused records a call that was not made, refused by rule (a policy rule or a limit).
func (t *trail) refused(ctx context.Context, sn seen, origin, tool string, args *structpb.Struct, rule string) {
	if c := t.begin(ctx, sn, origin, tool, args); c != nil {
		c.rec.Decision, c.rec.Rule = audit.Denied, rule
		c.end(ctx, nil, false, nil)
	}
}
