package api

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// strictQuery refuses query parameters that name no field of the request, the way an unknown
// body field is refused: the gateway's default parser drops them silently, so a typo such as
// ?sever=calculator would answer as if no filter had been asked for.
type strictQuery struct{ runtime.DefaultQueryParser }

func (p *strictQuery) Parse(msg proto.Message, values url.Values, filter *utilities.DoubleArray) error {
	desc := msg.ProtoReflect().Descriptor()
	for _, key := range slices.Sorted(maps.Keys(values)) {
		if !knownField(desc, key) {
			return fmt.Errorf("unknown query parameter %q: this path takes %s", key, queryFields(desc, filter))
		}
	}
	return p.DefaultQueryParser.Parse(msg, values, filter)
}

// knownField reports whether key (a field path by proto or JSON names, dots between levels,
// with an optional [map key] at the end) names a field of desc.
func knownField(desc protoreflect.MessageDescriptor, key string) bool {
	if i := strings.IndexByte(key, '['); i > 0 && strings.HasSuffix(key, "]") {
		key = key[:i]
	}
	parts := strings.Split(key, ".")
	for i, name := range parts {
		fields := desc.Fields()
		fd := fields.ByTextName(name)
		if fd == nil {
			fd = fields.ByJSONName(name)
		}
		if fd == nil {
			return false
		}
		if i == len(parts)-1 {
			return true
		}
		if fd.Message() == nil || fd.Cardinality() == protoreflect.Repeated {
			return false
		}
		desc = fd.Message()
	}
	return false
}

// queryFields lists the top-level fields a query may set: those not bound from the path.
func queryFields(desc protoreflect.MessageDescriptor, filter *utilities.DoubleArray) string {
	var names []string
	fields := desc.Fields()
	for i := range fields.Len() {
		name := string(fields.Get(i).Name())
		if filter != nil && filter.HasCommonPrefix([]string{name}) {
			continue
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return "no query parameters"
	}
	return strings.Join(names, ", ")
}

// noQuery refuses any query parameter on a path whose request takes none.
func noQuery(gw *runtime.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if q := r.URL.Query(); len(q) > 0 {
			key := slices.Sorted(maps.Keys(q))[0]
			err := status.Errorf(codes.InvalidArgument, "unknown query parameter %q: this path takes no query parameters", key)
			_, out := runtime.MarshalerForRequest(gw, r)
			withTraceID(runtime.DefaultHTTPErrorHandler)(r.Context(), gw, out, w, r, err)
			return
		}
		gw.ServeHTTP(w, r)
	})
}
