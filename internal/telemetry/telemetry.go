// Package telemetry sets up OpenTelemetry tracing and metrics for toolmesh's targets and
// returns them as values: one Telemetry per process, one Service per target, so each target
// reports as its own service (toolmesh-api, toolmesh-executor, ...) in `up` mode too.
//
// Traces are exported over OTLP/gRPC when an endpoint is given (--otel.endpoint, or the
// standard OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); the sampler
// follows OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG, extra resource attributes
// OTEL_RESOURCE_ATTRIBUTES, and OTEL_SDK_DISABLED=true turns everything off. Without an
// endpoint spans are never sampled: they still carry trace ids (for responses and logs) but
// record nothing and export nothing. Metrics are always kept for /metrics (Prometheus text)
// and pushed over OTLP too with --otel.export-metrics or OTEL_METRICS_EXPORTER=otlp. Log
// records (the audit trail's) go over OTLP with --otel.export-logs or OTEL_LOGS_EXPORTER=otlp;
// otherwise a target's loggers emit nothing.
package telemetry

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploggrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	otellog "go.opentelemetry.io/otel/log"
	lognoop "go.opentelemetry.io/otel/log/noop"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
)

// Config is the telemetry configuration shared by a process's targets.
type Config struct {
	// Endpoint is the OTLP/gRPC collector (host:port, or a URL); empty falls back to the
	// standard OTEL_EXPORTER_OTLP_* variables, and without them nothing is exported.
	Endpoint string
	// Insecure sends OTLP without TLS (a collector on loopback or a private network).
	Insecure bool
	// ExportMetrics pushes metrics over OTLP too (to a collector that takes them; Jaeger does not).
	ExportMetrics bool
	// ExportLogs pushes log records (the audit trail's) over OTLP, to a collector that takes them.
	ExportLogs bool
	// RecordPayloads records tool arguments and results on spans, cut to PayloadLimit bytes.
	// Off by default: they may hold secrets.
	RecordPayloads bool
	PayloadLimit   int
	// SpanExporter, when set, receives every target's spans instead of an OTLP collector (tests
	// read them from an in-memory exporter). Not a flag.
	SpanExporter sdktrace.SpanExporter
	// LogExporter, when set, receives every target's log records instead of an OTLP collector
	// (tests). Not a flag.
	LogExporter sdklog.Exporter
}

// RegisterFlags sets the defaults and binds them to flags prefixed "otel.".
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Endpoint, "otel.endpoint", "", "OTLP/gRPC collector for traces and metrics (host:port, e.g. Jaeger's 127.0.0.1:4317); empty uses OTEL_EXPORTER_OTLP_ENDPOINT, and without either nothing is exported")
	fs.BoolVar(&c.Insecure, "otel.insecure", true, "send OTLP without TLS (collector on loopback or a private network); OTEL_EXPORTER_OTLP_INSECURE applies when --otel.endpoint is empty")
	fs.BoolVar(&c.ExportMetrics, "otel.export-metrics", false, "also push metrics over OTLP to --otel.endpoint (a collector that takes metrics; Jaeger does not); OTEL_METRICS_EXPORTER=otlp does the same; /metrics is always served")
	fs.BoolVar(&c.ExportLogs, "otel.export-logs", false, "push log records (the audit trail's, one per tool call) over OTLP to --otel.endpoint, to a collector that takes logs (Jaeger does not); OTEL_LOGS_EXPORTER=otlp does the same")
	fs.BoolVar(&c.RecordPayloads, "otel.record-payloads", false, "record tool arguments and results on spans (they may hold secrets), cut to --otel.payload-limit bytes")
	fs.IntVar(&c.PayloadLimit, "otel.payload-limit", 1024, "longest tool argument or result recorded on a span, in bytes")
}

// Validate reports the first bad value, naming its flag.
func (c *Config) Validate() error {
	if c.PayloadLimit < 0 {
		return fmt.Errorf("otel.payload-limit: %d must not be negative", c.PayloadLimit)
	}
	return nil
}

// Telemetry is one process's telemetry: the Prometheus registry its targets share and the
// providers to flush on shutdown.
type Telemetry struct {
	cfg           Config
	export        bool
	exportMetrics bool
	exportLogs    bool
	disabled      bool
	registry      *prometheus.Registry

	mu       sync.Mutex
	services []*Service
}

// New checks the configuration; nothing connects until a span or metric is exported.
func New(cfg Config) (*Telemetry, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &Telemetry{cfg: cfg, registry: prometheus.NewRegistry()}
	t.disabled = strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true")
	t.export = !t.disabled && (cfg.SpanExporter != nil || cfg.Endpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" ||
		os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "")
	// Trace backends such as Jaeger take no metrics: pushing them is asked for explicitly.
	t.exportMetrics = !t.disabled && (cfg.ExportMetrics || strings.EqualFold(os.Getenv("OTEL_METRICS_EXPORTER"), "otlp") ||
		os.Getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") != "")
	t.exportLogs = !t.disabled && (cfg.ExportLogs || cfg.LogExporter != nil || strings.EqualFold(os.Getenv("OTEL_LOGS_EXPORTER"), "otlp") ||
		os.Getenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT") != "")
	if err := t.registry.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("go metrics: %w", err)
	}
	if err := t.registry.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("process metrics: %w", err)
	}
	return t, nil
}

// Exporting says whether spans and metrics go to an OTLP collector.
func (t *Telemetry) Exporting() bool { return t.export }

// Service makes the providers of one target, reported as service name (e.g. "toolmesh-api").
func (t *Telemetry) Service(ctx context.Context, name string) (*Service, error) {
	s := &Service{
		Name:       name,
		Propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		Payloads:   PayloadPolicy{Record: t.cfg.RecordPayloads, Limit: t.cfg.PayloadLimit},
	}
	if t.disabled {
		s.tracerProvider = tracenoop.NewTracerProvider()
		s.meterProvider = metricnoop.NewMeterProvider()
		return s, nil
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(name), semconv.ServiceNamespace("toolmesh")))
	if err != nil {
		return nil, fmt.Errorf("telemetry resource for %s: %w", name, err)
	}
	// OTEL_SERVICE_NAME must not rename every target alike; ours wins over the environment's.
	res, err = resource.Merge(res, resource.NewSchemaless(semconv.ServiceName(name)))
	if err != nil {
		return nil, fmt.Errorf("telemetry resource for %s: %w", name, err)
	}

	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if t.export {
		exp := t.cfg.SpanExporter
		if exp == nil {
			var eopts []otlptracegrpc.Option
			if t.cfg.Endpoint != "" {
				eopts = append(eopts, endpointOption(t.cfg.Endpoint, otlptracegrpc.WithEndpoint, otlptracegrpc.WithEndpointURL))
				if t.cfg.Insecure {
					eopts = append(eopts, otlptracegrpc.WithInsecure())
				}
			}
			if exp, err = otlptracegrpc.New(ctx, eopts...); err != nil {
				return nil, fmt.Errorf("otlp trace exporter: %w", err)
			}
		}
		// A span records errors, and an MCP server's error quotes its URL: no credential of one
		// may leave the process.
		exp = redactSpans(exp)
		tpOpts = append(tpOpts, sdktrace.WithBatcher(exp))
	} else {
		tpOpts = append(tpOpts, sdktrace.WithSampler(sdktrace.NeverSample()))
	}
	tp := sdktrace.NewTracerProvider(tpOpts...)
	s.tracerProvider, s.sdkTracer = tp, tp

	promExp, err := otelprom.New(otelprom.WithRegisterer(t.registry),
		otelprom.WithResourceAsConstantLabels(attribute.NewAllowKeysFilter(semconv.ServiceNameKey)),
		otelprom.WithoutScopeInfo())
	if err != nil {
		_ = tp.Shutdown(ctx)
		return nil, fmt.Errorf("prometheus exporter for %s: %w", name, err)
	}
	mpOpts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(promExp)}
	if t.exportMetrics {
		var mopts []otlpmetricgrpc.Option
		if t.cfg.Endpoint != "" {
			mopts = append(mopts, endpointOption(t.cfg.Endpoint, otlpmetricgrpc.WithEndpoint, otlpmetricgrpc.WithEndpointURL))
			if t.cfg.Insecure {
				mopts = append(mopts, otlpmetricgrpc.WithInsecure())
			}
		}
		mexp, err := otlpmetricgrpc.New(ctx, mopts...)
		if err != nil {
			_ = tp.Shutdown(ctx)
			return nil, fmt.Errorf("otlp metric exporter: %w", err)
		}
		mpOpts = append(mpOpts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(mexp)))
	}
	mp := sdkmetric.NewMeterProvider(mpOpts...)
	s.meterProvider, s.sdkMeter = mp, mp

	if t.exportLogs {
		exp := t.cfg.LogExporter
		if exp == nil {
			var lopts []otlploggrpc.Option
			if t.cfg.Endpoint != "" {
				lopts = append(lopts, endpointOption(t.cfg.Endpoint, otlploggrpc.WithEndpoint, otlploggrpc.WithEndpointURL))
				if t.cfg.Insecure {
					lopts = append(lopts, otlploggrpc.WithInsecure())
				}
			}
			if exp, err = otlploggrpc.New(ctx, lopts...); err != nil {
				_ = tp.Shutdown(ctx)
				_ = mp.Shutdown(ctx)
				return nil, fmt.Errorf("otlp log exporter: %w", err)
			}
		}
		lp := sdklog.NewLoggerProvider(sdklog.WithResource(res), sdklog.WithProcessor(sdklog.NewBatchProcessor(exp)))
		s.loggerProvider, s.sdkLogger = lp, lp
	}

	t.mu.Lock()
	t.services = append(t.services, s)
	t.mu.Unlock()
	return s, nil
}

// endpointOption takes host:port as an endpoint and anything with a scheme as a URL.
func endpointOption[O any](endpoint string, hostPort func(string) O, url func(string) O) O {
	if strings.Contains(endpoint, "://") {
		return url(endpoint)
	}
	return hostPort(endpoint)
}

// MetricsHandler serves every target's metrics and the process's Go runtime metrics in the
// Prometheus text format.
func (t *Telemetry) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Shutdown flushes and stops every target's providers; spans still buffered are sent first.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	t.mu.Lock()
	services := t.services
	t.services = nil
	t.mu.Unlock()
	var errs []error
	for _, s := range services {
		if s.sdkTracer != nil {
			errs = append(errs, s.sdkTracer.Shutdown(ctx))
		}
		if s.sdkMeter != nil {
			errs = append(errs, s.sdkMeter.Shutdown(ctx))
		}
		if s.sdkLogger != nil {
			errs = append(errs, s.sdkLogger.Shutdown(ctx))
		}
	}
	return errors.Join(errs...)
}

// PayloadPolicy says whether tool arguments and results may be recorded on spans.
type PayloadPolicy struct {
	Record bool
	Limit  int
}

// Cut returns s as it may be recorded: cut to the limit without splitting a character.
func (p PayloadPolicy) Cut(s string) string {
	if len(s) <= p.Limit {
		return s
	}
	n := p.Limit
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

// Service is one target's tracer and meter providers. A nil *Service is valid and records
// nothing, so code under test needs no telemetry.
type Service struct {
	Name       string
	Propagator propagation.TextMapPropagator
	Payloads   PayloadPolicy

	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
	loggerProvider otellog.LoggerProvider // nil: logs are not exported
	sdkTracer      *sdktrace.TracerProvider
	sdkMeter       *sdkmetric.MeterProvider
	sdkLogger      *sdklog.LoggerProvider
}

// NewForTest returns a Service that records with the given providers, e.g. an SDK tracer
// provider over tracetest's in-memory exporter and a meter provider over a ManualReader.
// A nil provider records nothing. Shutting the providers down is up to the caller.
func NewForTest(name string, tp trace.TracerProvider, mp metric.MeterProvider, payloads PayloadPolicy) *Service {
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	return &Service{
		Name:           name,
		Propagator:     propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		Payloads:       payloads,
		tracerProvider: tp,
		meterProvider:  mp,
	}
}

// TracerProvider is the target's tracer provider (a no-op one for a nil Service).
func (s *Service) TracerProvider() trace.TracerProvider {
	if s == nil {
		return tracenoop.NewTracerProvider()
	}
	return s.tracerProvider
}

// MeterProvider is the target's meter provider (a no-op one for a nil Service).
func (s *Service) MeterProvider() metric.MeterProvider {
	if s == nil {
		return metricnoop.NewMeterProvider()
	}
	return s.meterProvider
}

// LoggerProvider is the target's logger provider: one that exports over OTLP with log export
// on, a no-op one otherwise (and for a nil Service).
func (s *Service) LoggerProvider() otellog.LoggerProvider {
	if s == nil || s.loggerProvider == nil {
		return lognoop.NewLoggerProvider()
	}
	return s.loggerProvider
}

// Logger is the target's logger for an instrumentation scope; its Enabled says whether records
// go anywhere.
func (s *Service) Logger(scope string) otellog.Logger { return s.LoggerProvider().Logger(scope) }

// Tracer is the target's tracer for an instrumentation scope.
func (s *Service) Tracer(scope string) trace.Tracer { return s.TracerProvider().Tracer(scope) }

// Meter is the target's meter for an instrumentation scope.
func (s *Service) Meter(scope string) metric.Meter { return s.MeterProvider().Meter(scope) }

func (s *Service) propagator() propagation.TextMapPropagator {
	if s == nil {
		return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	return s.Propagator
}

// GRPCServerOptions trace and measure every RPC the target serves.
func (s *Service) GRPCServerOptions() []grpc.ServerOption {
	if s == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(s.GRPCServerStats())}
}

// GRPCServerStats is the stats handler of GRPCServerOptions, for a server that is no
// grpc.Server (server.Local, in one process); nil when s is.
func (s *Service) GRPCServerStats() stats.Handler {
	if s == nil {
		return nil
	}
	return otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(s.tracerProvider), otelgrpc.WithMeterProvider(s.meterProvider),
		otelgrpc.WithPropagators(s.Propagator),
		// Health probes would drown every other span.
		otelgrpc.WithFilter(func(info *stats.RPCTagInfo) bool { return !strings.HasPrefix(info.FullMethodName, "/grpc.health.v1.") }),
	)
}

// GRPCDialOptions trace and measure every RPC the target makes, and carry the trace context.
func (s *Service) GRPCDialOptions() []grpc.DialOption {
	if s == nil {
		return nil
	}
	return []grpc.DialOption{grpc.WithStatsHandler(s.GRPCClientStats())}
}

// GRPCClientStats is the stats handler of GRPCDialOptions, for a client that is no
// grpc.ClientConn (server.LocalClient); nil when s is.
func (s *Service) GRPCClientStats() stats.Handler {
	if s == nil {
		return nil
	}
	return otelgrpc.NewClientHandler(
		otelgrpc.WithTracerProvider(s.tracerProvider), otelgrpc.WithMeterProvider(s.meterProvider),
		otelgrpc.WithPropagators(s.Propagator),
	)
}

// HTTPTransport traces outbound HTTP requests made through base (nil: http.DefaultTransport)
// and sends the trace context in their headers. Only requests inside a sampled span go
// through the instrumentation: for the rest it would cost more than the call it wraps and
// record nothing.
func (s *Service) HTTPTransport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	if s == nil {
		return base
	}
	traced := otelhttp.NewTransport(base, otelhttp.WithTracerProvider(s.tracerProvider),
		otelhttp.WithMeterProvider(s.meterProvider), otelhttp.WithPropagators(s.Propagator))
	return sampledTransport{traced: traced, plain: base}
}

type sampledTransport struct{ traced, plain http.RoundTripper }

func (t sampledTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if trace.SpanContextFromContext(r.Context()).IsSampled() {
		return t.traced.RoundTrip(r)
	}
	return t.plain.RoundTrip(r)
}

// HTTPHandler traces and measures inbound HTTP requests to the server listening on addr,
// continuing a trace the caller sent. addr is the server.address of the metrics: left to
// otelhttp, that is the request's Host header, which the caller chooses, and each host made
// up would be a series for good.
func (s *Service) HTTPHandler(h http.Handler, operation, addr string, skip func(*http.Request) bool) http.Handler {
	if s == nil {
		return h
	}
	opts := []otelhttp.Option{otelhttp.WithTracerProvider(s.tracerProvider),
		otelhttp.WithMeterProvider(s.meterProvider), otelhttp.WithPropagators(s.Propagator),
		otelhttp.WithServerName(addr),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + r.URL.Path })}
	if skip != nil {
		opts = append(opts, otelhttp.WithFilter(func(r *http.Request) bool { return !skip(r) }))
	}
	return otelhttp.NewHandler(h, operation, opts...)
}

// Inject writes ctx's trace context into carrier (e.g. an MCP request's params._meta).
func (s *Service) Inject(ctx context.Context, carrier propagation.TextMapCarrier) {
	s.propagator().Inject(ctx, carrier)
}

// Extract reads a trace context from carrier into ctx.
func (s *Service) Extract(ctx context.Context, carrier propagation.TextMapCarrier) context.Context {
	return s.propagator().Extract(ctx, carrier)
}

// MetaCarrier lets a propagator read and write trace context in an MCP request's params._meta
// (traceparent, tracestate, baggage), where MCP 2026-07-28 puts it.
type MetaCarrier map[string]any

// Get returns the string value of key, or "".
func (c MetaCarrier) Get(key string) string {
	s, _ := c[key].(string)
	return s
}

// Set stores value under key.
func (c MetaCarrier) Set(key, value string) { c[key] = value }

// Keys lists the keys present.
func (c MetaCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
