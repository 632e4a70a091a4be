package redact

import (
	"context"
	"fmt"
	"log/slog"
)

// Handler wraps h so that no record reaches it with a credential of a URL: the message and
// every attribute (errors, fmt.Stringers and other values that print a URL included, groups
// too) go through Text first. Records with nothing Text would change pass through untouched.
func Handler(h slog.Handler) slog.Handler {
	if _, ok := h.(handler); ok {
		return h
	}
	return handler{h}
}

type handler struct{ slog.Handler }

func (h handler) Handle(ctx context.Context, r slog.Record) error {
	dirty := MayHold(r.Message)
	if !dirty {
		r.Attrs(func(a slog.Attr) bool {
			dirty = mayHoldURL(a.Value)
			return !dirty
		})
	}
	if !dirty {
		return h.Handler.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, Text(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(attr(a))
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h handler) WithAttrs(as []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(as))
	for i, a := range as {
		clean[i] = attr(a)
	}
	return handler{h.Handler.WithAttrs(clean)}
}

func (h handler) WithGroup(name string) slog.Handler { return handler{h.Handler.WithGroup(name)} }

// mayHoldURL is true for values that need a closer look: strings Text may change and the
// kinds whose text is only known once formatted.
func mayHoldURL(v slog.Value) bool {
	switch v.Kind() {
	case slog.KindString:
		return MayHold(v.String())
	case slog.KindAny, slog.KindGroup, slog.KindLogValuer:
		return true
	}
	return false
}

func attr(a slog.Attr) slog.Attr {
	return slog.Attr{Key: a.Key, Value: value(a.Value)}
}

func value(v slog.Value) slog.Value {
	v = v.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.StringValue(Text(v.String()))
	case slog.KindGroup:
		as := v.Group()
		clean := make([]slog.Attr, len(as))
		for i, a := range as {
			clean[i] = attr(a)
		}
		return slog.GroupValue(clean...)
	case slog.KindAny:
		var text string
		switch x := v.Any().(type) {
		case error:
			return slog.StringValue(Text(x.Error()))
		case fmt.Stringer:
			text = x.String()
		default:
			text = fmt.Sprintf("%+v", x)
		}
		// Other values keep their shape unless their text shows a URL.
		if MayHold(text) && Text(text) != text {
			return slog.StringValue(Text(text))
		}
	}
	return v
}
