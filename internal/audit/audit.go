// Package audit keeps toolmesh's audit trail: one record per tool call (REST, gRPC, the MCP
// face, the agent loop, chat), refused calls included, and one per event worth keeping (a tool
// quarantined or approved).
//
// Records are JSON lines, hash-chained: each carries the hash of the record before it ("prev")
// and its own ("hash"), and each file begins with a start record that carries the hash of the
// file before it. Verify finds a record edited, removed or moved, and names the first bad one.
// With a key (--audit.key-file) the hashes are HMACs, so that no one without the key can write
// a trail that verifies. The records go to a file (rotated by size), or stdout, and out as
// OpenTelemetry log records whose body is the line itself.
//
// Writing never holds a call: Record hands the record to one writer goroutine through a
// bounded queue and returns. The writer turns whatever has queued into one write, fsyncs on an
// interval, and when a write fails (a full disk) cuts off what it half wrote and keeps the
// records to write again. A record that finds the queue full is dropped, counted, logged and
// declared in the next record written ("dropped": N): the trail says where it has a gap. Under
// --audit.on-failure=closed, Ready refuses new calls while records cannot be written.
package audit

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otellog "go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/internal/logsample"
)

// Decisions: what the policy (or a limit) said about a call.
const (
	Allowed = "allowed"
	Denied  = "denied"
)

// Origins: who chose the call.
const (
	OriginCall  = "call"  // a client's tool call: REST, gRPC, the MCP face
	OriginQuery = "query" // a direct @SERVER.TOOL(...) call in a query
	OriginModel = "model" // the model, in the agent loop
)

// What a record keeps of a call's arguments (--audit.arguments).
const (
	ArgumentsDigest = "digest" // their digest only
	ArgumentsFull   = "full"   // the arguments too, what looks like a secret masked
)

// What happens when records cannot be written (--audit.on-failure).
const (
	FailOpen   = "open"   // calls go on; lost records are counted, logged and declared
	FailClosed = "closed" // calls are refused until the trail is written again
)

const (
	// queueSize bounds the records waiting for the writer: about 3 MB of records, a few
	// seconds of the mesh's fastest calls, before records are dropped rather than held.
	queueSize = 8192
	// maxArgumentBytes bounds the arguments a record holds (with arguments full); larger ones
	// are left out, their digest kept, so that one call cannot make a record of megabytes.
	maxArgumentBytes = 16 << 10
	// minKeyBytes is the shortest key accepted: 256 bits, SHA-256's own strength.
	minKeyBytes = 32
)

// Config is the audit trail's configuration (the audit.* flags).
type Config struct {
	// File is where records go: a path, "-" for stdout, "" for no file.
	File         string
	Arguments    string
	MaxBytes     int64
	MaxFiles     int
	SyncInterval time.Duration
	OnFailure    string
	KeyFile      string
}

// RegisterFlags sets the defaults and binds them to flags prefixed "audit.".
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.File, "audit.file", "", `write the audit trail (a hash-chained JSON line per tool call, refused calls included; docs/operations/audit.md) to this file, rotated past --audit.max-bytes; "-" writes it to stdout; empty: no file (records still go out as OpenTelemetry log records with --otel.export-logs)`)
	fs.StringVar(&c.Arguments, "audit.arguments", ArgumentsDigest, "what a record keeps of a call's arguments: digest (their SHA-256, an HMAC with --audit.key-file) or full (the arguments too, values that look like secrets masked)")
	fs.Int64Var(&c.MaxBytes, "audit.max-bytes", 100<<20, "size past which the audit file is rotated (renamed with the time, a new one begun, chained to it); 0: never")
	fs.IntVar(&c.MaxFiles, "audit.max-files", 0, "rotated audit files kept beside the live one (the oldest are deleted); 0: every one")
	fs.DurationVar(&c.SyncInterval, "audit.sync-interval", time.Second, "how often written records are fsynced: a machine crash loses at most this much of the trail (a process crash only the records not yet written, a few ms); 0: after every write")
	fs.StringVar(&c.OnFailure, "audit.on-failure", FailOpen, "when records cannot be written (a full disk, a writer that does not keep up): open calls tools on and counts, logs and declares the records lost; closed refuses tool calls (503) until the trail is written again")
	fs.StringVar(&c.KeyFile, "audit.key-file", "", "file holding a secret key (at least 32 bytes) that makes the chain and the argument digests HMAC-SHA256: without it no one can rewrite the trail so that it verifies, or try guesses against a digest")
}

// Validate reports the first bad value, naming its flag. The zero Config is valid: no file,
// digests, fail-open, no rotation.
func (c *Config) Validate() error {
	switch {
	case c.Arguments != "" && c.Arguments != ArgumentsDigest && c.Arguments != ArgumentsFull:
		return fmt.Errorf("audit.arguments: %q is neither %s nor %s", c.Arguments, ArgumentsDigest, ArgumentsFull)
	case c.OnFailure != "" && c.OnFailure != FailOpen && c.OnFailure != FailClosed:
		return fmt.Errorf("audit.on-failure: %q is neither %s nor %s", c.OnFailure, FailOpen, FailClosed)
	case c.MaxBytes < 0 || c.MaxBytes > 0 && c.MaxBytes < 4<<10:
		return fmt.Errorf("audit.max-bytes: %d must be 0 (never rotate) or at least 4096", c.MaxBytes)
	case c.MaxFiles < 0:
		return fmt.Errorf("audit.max-files: %d is negative", c.MaxFiles)
	case c.SyncInterval < 0:
		return fmt.Errorf("audit.sync-interval: %s is negative", c.SyncInterval)
	}
	return nil
}

// Record is one tool call, or one event. The Recorder fills in the time (when zero), the trace
// id (from the context) and what it keeps of the arguments.
type Record struct {
	Time time.Time
	// Type is "call" when empty; an event names its kind ("pin.approved", "pin.quarantined").
	Type string
	// Token is the API token's name (auth.Name), "" without tokens.
	Token string
	// Client is the address the api saw the request come from; ForwardedFor is what the
	// client (or a proxy in front) claimed in X-Forwarded-For: recorded, not believed.
	Client       string
	ForwardedFor string
	// Via is the front the call came through: rest, grpc, mcp, chat.
	Via    string
	Origin string
	Tool   string
	// Arguments are the call's arguments; nil is none. They must not change once recorded.
	Arguments *structpb.Struct
	// ArgumentsJSON are the arguments as JSON text, when the call carried them so and
	// Arguments is nil: the writer decodes them, off the call's path, into the same canonical
	// form (and digest) as the Struct. They must not change once recorded.
	ArgumentsJSON []byte
	ResultBytes   int
	IsError       bool
	Duration      time.Duration
	// Decision is Allowed or Denied; Rule names what denied it (a policy rule, a limit).
	Decision string
	Rule     string
	// Status is the gRPC code of a call that failed rather than returned a result.
	Status string
	// Detail says more about an event.
	Detail string
}

// Options are what a Recorder reports through, passed in (never read from globals).
type Options struct {
	Logger *slog.Logger   // nil: none
	Meter  metric.Meter   // nil: none
	Log    otellog.Logger // nil: no OpenTelemetry log records
	// sink replaces the file, in tests.
	sink sink
}

// Recorder writes the trail. It is safe for concurrent use; a nil *Recorder records nothing.
type Recorder struct {
	cfg     Config
	enabled bool
	logger  *slog.Logger
	otel    otellog.Logger // nil: none
	q       chan item
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	closed  atomic.Bool
	// lost counts the records dropped and not yet declared in a record written.
	lost atomic.Int64
	// failure is the error of the last write or sync while it keeps failing; nil when the
	// trail is written.
	failure atomic.Pointer[error]
	drops   *logsample.Sampler
	w       *writer

	records     metric.Int64Counter
	writeErrors metric.Int64Counter
}

// item is a record on its way to the writer, with the trace it belongs to.
type item struct {
	rec Record
	sc  trace.SpanContext
}

// New opens the trail (moving an existing file aside, a new file chained to it) and starts its
// writer. With no file and no OpenTelemetry logger that emits, the Recorder records nothing.
func New(cfg Config, opts Options) (*Recorder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Arguments == "" {
		cfg.Arguments = ArgumentsDigest
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &Recorder{cfg: cfg, logger: logger, drops: logsample.New(logger, 3, 10*time.Second)}
	if opts.Log != nil && opts.Log.Enabled(context.Background(), otellog.EnabledParameters{}) {
		r.otel = opts.Log
	}
	r.enabled = cfg.File != "" || r.otel != nil
	meter := opts.Meter
	if meter == nil {
		meter = metricnoop.Meter{}
	}
	var err error
	if r.records, err = meter.Int64Counter("toolmesh.audit.records", metric.WithDescription("Audit records, by outcome: written, or dropped (the writer did not keep up; declared in the next record written).")); err != nil {
		r.records, _ = metricnoop.Meter{}.Int64Counter("")
	}
	if r.writeErrors, err = meter.Int64Counter("toolmesh.audit.write_errors", metric.WithDescription("Failed writes and fsyncs of the audit trail (its records are kept and written again).")); err != nil {
		r.writeErrors, _ = metricnoop.Meter{}.Int64Counter("")
	}
	if !r.enabled {
		return r, nil
	}
	var key []byte
	if cfg.KeyFile != "" {
		if key, err = ReadKey(cfg.KeyFile); err != nil {
			return nil, fmt.Errorf("audit.key-file: %w", err)
		}
	}
	w, err := newWriter(r, cfg, key, opts.sink)
	if err != nil {
		return nil, fmt.Errorf("audit.file: %w", err)
	}
	r.w = w
	r.q, r.stop, r.done = make(chan item, queueSize), make(chan struct{}), make(chan struct{})
	go w.run()
	logger.Info("audit trail", "file", cfg.File, "arguments", cfg.Arguments, "on_failure", cfg.OnFailure, "keyed", key != nil,
		"otel", r.otel != nil, "sync_interval", cfg.SyncInterval)
	return r, nil
}

// Enabled says whether records go anywhere.
func (r *Recorder) Enabled() bool { return r != nil && r.enabled }

// Record queues rec for the writer and returns at once; when the queue is full rec is dropped,
// counted and declared in the next record written.
func (r *Recorder) Record(ctx context.Context, rec Record) {
	if !r.Enabled() {
		return
	}
	if rec.Time.IsZero() {
		rec.Time = time.Now()
	}
	if r.closed.Load() {
		r.drop(ctx, "the trail is closed")
		return
	}
	select {
	case r.q <- item{rec: rec, sc: trace.SpanContextFromContext(ctx)}:
	default:
		r.drop(ctx, "the trail's writer does not keep up")
	}
}

// Event records an event of kind (e.g. "pin.quarantined") about tool.
func (r *Recorder) Event(ctx context.Context, kind, tool, detail string) {
	r.Record(ctx, Record{Type: kind, Tool: tool, Detail: detail})
}

func (r *Recorder) drop(ctx context.Context, why string) {
	r.lost.Add(1)
	r.records.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(attribute.String("outcome", "dropped")))
	r.drops.Log(ctx, slog.LevelWarn, "audit records dropped: "+why+" (the next record written says how many)", "queue", queueSize)
}

// Ready is nil unless the trail fails closed and cannot be written now (a write or fsync
// fails, or records were dropped and not yet declared): then it says why, and the caller
// refuses the call it was about to make.
func (r *Recorder) Ready() error {
	if !r.Enabled() || r.cfg.OnFailure != FailClosed {
		return nil
	}
	if err := r.failure.Load(); err != nil {
		return fmt.Errorf("the audit trail cannot be written (--audit.on-failure=closed): %w", *err)
	}
	if n := r.lost.Load(); n > 0 {
		return fmt.Errorf("the audit trail dropped %d records its writer could not keep up with (--audit.on-failure=closed)", n)
	}
	return nil
}

// Close writes what is queued, fsyncs and closes the file. Records after Close are dropped.
// It waits at most 10 s for a writer stuck in a write (a hung disk), then says what it left.
func (r *Recorder) Close() error {
	if !r.Enabled() || r.w == nil {
		return nil
	}
	r.once.Do(func() {
		r.closed.Store(true)
		close(r.stop)
	})
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		return errors.New("audit trail: the writer is stuck in a write; records still queued are lost")
	}
	if n := r.lost.Load(); n > 0 {
		return fmt.Errorf("audit trail: %d records were dropped and could not be declared in the trail", n)
	}
	if err := r.failure.Load(); err != nil {
		return fmt.Errorf("audit trail: %w", *err)
	}
	return nil
}
