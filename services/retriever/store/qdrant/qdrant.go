// Package qdrant is the tool index on a Qdrant server (github.com/qdrant/go-client, gRPC).
//
// One collection per embedder: its name carries the model id and the dense dimension
// (CollectionName), so switching models never mixes vectors. The collection has a named dense
// vector "dense" (cosine) when the embedder has one, one named sparse vector per lexical vector
// name with Qdrant's IDF modifier (the store's sparse weights are term-frequency parts only;
// Qdrant supplies the IDF), and a keyword payload index on "server". Qdrant normalizes dense
// vectors for Cosine distance itself, on upsert and on query, so embeddings need not be unit
// length.
//
// Search uses the Query API: a single vector is queried directly; several are prefetched and
// fused with reciprocal rank fusion on the server. Qdrant's RRF scores a rank r (0-based) as
// 1/(r+k) with k = 2 by default, so fused scores are rank scores, not similarities.
// Non-uniform Query.Weights are sent as RRF weights, which needs Qdrant ≥ 1.17; against an
// older server they are ignored (equal weights). A weight ≤ 0 leaves that vector out. Qdrant
// does not break ties between fused scores (their order, and which of them survive the limit,
// change from one query to the next), so the store orders tied hits by tool id, asking for a few
// more points than wanted to see the whole tie at the cut (see Search).
//
// Writes are not transactions. Qdrant applies one upsert in chunks of 32 points with the segment
// locks released in between (upsert_points in lib/shard/src/update.rs), so a search running
// meanwhile can see part of a batch, and an update that fails while being applied keeps the
// chunks applied before (one that failed for a transient reason, such as a full disk, is applied
// again later from the WAL: CollectionUpdater in
// lib/collection/src/collection_manager/collection_updater.rs). An update Qdrant has accepted is
// applied even when the call fails afterwards — a timeout, a cancelled caller, a dropped
// connection, or status WaitTimeout — so a write the store reported failed may land later.
// The store therefore does not promise that a failed write left the earlier state: it counts
// the writes it gave up on, and its next Hashes (the read the retriever reconciles with) first
// waits for them with a barrier write, so the reconcile sees what Qdrant will keep and rewrites
// or deletes whatever differs from the executor's tools. Until that sync has run, searches may
// answer from a partly written index.
//
// IDF drift: Qdrant only marks a deleted point (or the old copy of a point updated after its
// segment was optimized) as deleted; its sparse postings stay, and the IDF statistics — the
// number of points N and the points per term df — keep counting it until the optimizer rebuilds
// the segment (delete_point_internal in lib/segment/src/segment/segment_ops.rs,
// fill_idf_statistics in lib/segment/src/index/sparse_index/sparse_vector_index.rs). The vacuum
// optimizer does so only for a segment of at least 1000 vectors with 20% of them deleted
// (optimizers.vacuum_min_vector_number and deleted_threshold in Qdrant's config), so a small
// tool index keeps counting removed tools: lexical scores drift from the memory store's, more so
// the more tools were removed. Deleting the collection makes the retriever rebuild it fresh.
//
// New does not need Qdrant to be up: the client connects lazily, and the collection is created
// on first use when New could not reach the server. Ready reports Qdrant's health check.
// Config.CAFile trusts a private certificate authority for Qdrant's TLS certificate.
package qdrant

import (
	"cmp"
	"context"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	qc "github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
	"github.com/toolmesh/toolmesh/services/retriever/store"
)

const (
	// DefaultCollection is the collection name prefix when Config.Collection is empty.
	DefaultCollection = "toolmesh_tools"
	// DefaultTimeout bounds each Qdrant call when Config.Timeout is zero.
	DefaultTimeout = 5 * time.Second
	// DenseVector is the name of the dense vector in the collection and in Query.Weights.
	DenseVector = "dense"
	// DefaultPort is Qdrant's gRPC port, used when Config.Addr has none.
	DefaultPort = 6334

	// Payload keys.
	payloadID     = "id"
	payloadServer = "server"
	payloadHash   = "hash"
	payloadTool   = "tool"

	// upsertBatch is the most points in one Upsert call (one Qdrant update; see the package doc
	// for what a failed one leaves).
	upsertBatch = 256
	deleteBatch = 512
	scrollPage  = 256
	// tiePad is how many more points than wanted a search asks for, so that points tied with
	// the last one wanted are seen and ordered by id (see Search).
	tiePad = 8
	// maxNameLen is Qdrant's limit on collection names.
	maxNameLen = 255
)

// reconnect is how often the connection to a Qdrant that went away is tried again. gRPC's
// default backoff grows to 120 s, so after an outage of a minute or two the retriever would
// stay failing for up to two more minutes after Qdrant is back; a local dependency is worth
// a dial every 2 s at most.
var reconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
	MinConnectTimeout: 5 * time.Second,
}

// Config is where the Qdrant server is and how to call it.
type Config struct {
	// Addr is host:port of Qdrant's gRPC API (port 6334 when omitted).
	Addr   string
	APIKey string
	UseTLS bool
	// CAFile, with UseTLS, is a PEM file of the certificate authorities to trust for Qdrant's
	// certificate instead of the system's (for a self-signed or private-CA certificate).
	CAFile string
	// Collection is the collection name prefix (default "toolmesh_tools"); the model id and
	// dimension are appended.
	Collection string
	// Timeout bounds every call to Qdrant (default 5 s).
	Timeout time.Duration
}

// Store is a store.Store on one Qdrant collection. It is safe for concurrent use.
type Store struct {
	client     *qc.Client
	addr       string
	collection string
	dim        int
	sparse     []string // sorted
	timeout    time.Duration

	// Batch and page sizes and the search's tie padding; fields so tests can make them small.
	upsertBatch, deleteBatch, scrollPage, tiePad int

	mu      sync.Mutex
	ensured bool
	// rrfWeights is whether the server takes weighted RRF (Qdrant ≥ 1.17), learned from its
	// health check when the collection is ensured.
	rrfWeights bool
	// givenUp counts the writes whose outcome the store does not know (failed calls: Qdrant may
	// apply them later), settled the value it had when the last barrier went through. Starting
	// at 1 makes the first read wait for writes an earlier process may have left in the queue.
	givenUp, settled uint64
}

var _ store.Store = (*Store)(nil)

// New connects to Qdrant lazily and makes sure the collection for this embedder exists: model
// names the embedder (for example "lexical-v1" or "all-MiniLM-L6-v2"), dim is its dense
// dimension (0: no dense vector) and sparseNames its lexical vector names. If Qdrant cannot be
// reached, New still returns the store: Ready reports the problem and the collection is created
// on first use. Any other failure (a bad config, a collection with another schema, a rejected
// API key) is returned.
func New(ctx context.Context, cfg Config, model string, dim int, sparseNames []string) (*Store, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if dim < 0 {
		return nil, fmt.Errorf("qdrant: dense dimension %d is negative", dim)
	}
	if sanitize(model) == "" {
		return nil, fmt.Errorf("qdrant: model id %q has no usable characters for a collection name", model)
	}
	sparse := slices.Clone(sparseNames)
	slices.Sort(sparse)
	for i, n := range sparse {
		switch {
		case n == "":
			return nil, errors.New("qdrant: empty sparse vector name")
		case n == DenseVector:
			return nil, fmt.Errorf("qdrant: sparse vector name %q is reserved for the dense vector", n)
		case i > 0 && sparse[i-1] == n:
			return nil, fmt.Errorf("qdrant: sparse vector name %q given twice", n)
		}
	}
	if dim == 0 && len(sparse) == 0 {
		return nil, errors.New("qdrant: no vectors: need a dense dimension or sparse vector names")
	}
	host, port, err := splitAddr(cfg.Addr)
	if err != nil {
		return nil, err
	}
	tlsConfig, err := clientTLS(cfg)
	if err != nil {
		return nil, err
	}
	client, err := qc.NewClient(&qc.Config{
		Host: clientHost(host), Port: port, APIKey: cfg.APIKey, UseTLS: cfg.UseTLS, TLSConfig: tlsConfig,
		// The compatibility check is a blocking HealthCheck inside NewClient (up to a minute
		// on an address that swallows packets) whose outcome is only logged; Ready and ensure
		// do the health check under our timeout instead.
		SkipCompatibilityCheck: true,
		// gRPC multiplexes calls on one HTTP/2 connection; the default pool of 3 buys nothing here.
		PoolSize:    1,
		GrpcOptions: []grpc.DialOption{grpc.WithConnectParams(reconnect)},
	})
	if err != nil {
		return nil, fmt.Errorf("qdrant: client for %s: %w", cfg.Addr, err)
	}
	s := &Store{
		client:      client,
		addr:        net.JoinHostPort(host, strconv.Itoa(port)),
		collection:  CollectionName(cfg.Collection, model, dim),
		dim:         dim,
		sparse:      sparse,
		timeout:     cfg.Timeout,
		upsertBatch: upsertBatch,
		deleteBatch: deleteBatch,
		scrollPage:  scrollPage,
		tiePad:      tiePad,
		givenUp:     1,
	}
	if err := s.ensure(ctx); err != nil && !unreachable(ctx, err) {
		_ = client.Close()
		return nil, err
	}
	return s, nil
}

// clientTLS is the TLS configuration for cfg: nil (the go-client's default: the system's roots,
// TLS 1.3) unless a CA file is given.
func clientTLS(cfg Config) (*tls.Config, error) {
	if cfg.CAFile == "" {
		return nil, nil
	}
	if !cfg.UseTLS {
		return nil, fmt.Errorf("qdrant: CA file %s given without TLS", cfg.CAFile)
	}
	pemBytes, err := os.ReadFile(cfg.CAFile)
	if err != nil {
		return nil, fmt.Errorf("qdrant: read CA file: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pemBytes) {
		return nil, fmt.Errorf("qdrant: CA file %s holds no PEM certificate", cfg.CAFile)
	}
	// The go-client's own default is TLS 1.3 minimum; keep it.
	return &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13}, nil
}

// Collection is the name of the store's collection.
func (s *Store) Collection() string { return s.collection }

// CollectionName is the collection for an embedder: PREFIX__MODEL for a lexical-only embedder,
// PREFIX__MODEL_DIM with a dense vector; the model id is lower-cased and every character
// outside [a-z0-9._-] becomes '-' (e.g. toolmesh_tools__all-minilm-l6-v2_384).
func CollectionName(prefix, model string, dim int) string {
	prefix = sanitize(prefix)
	if prefix == "" {
		prefix = DefaultCollection
	}
	name := prefix + "__" + sanitize(model)
	suffix := ""
	if dim > 0 {
		suffix = "_" + strconv.Itoa(dim)
	}
	if len(name)+len(suffix) > maxNameLen {
		sum := sha1.Sum([]byte(name))
		keep := maxNameLen - len(suffix) - 9
		name = name[:keep] + "-" + hex.EncodeToString(sum[:4])
	}
	return name + suffix
}

// sanitize lower-cases s and maps every character outside [a-z0-9._-] to '-', collapsing runs
// of '-' and trimming them at both ends.
func sanitize(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '_' || r == '.' {
			b.WriteRune(r)
			dash = false
			continue
		}
		if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimRight(b.String(), "-")
}

// PointID is the point id of a tool id: a UUID derived as in RFC 9562 version 5 (SHA-1 of a
// fixed toolmesh namespace and the tool id), so upserting a tool again overwrites its point.
func PointID(toolID string) string {
	h := sha1.New()
	h.Write(pointNamespace[:])
	h.Write([]byte(toolID))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = (u[6] & 0x0f) | 0x50 // version 5
	u[8] = (u[8] & 0x3f) | 0x80 // RFC 9562 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// pointNamespace is the fixed namespace of PointID; changing it re-keys every stored point.
var pointNamespace = [16]byte{0x3b, 0x5e, 0x0c, 0x7a, 0x91, 0x24, 0x4f, 0x6d, 0x8a, 0x1e, 0x52, 0xc9, 0x07, 0xd3, 0x66, 0xb8}

func splitAddr(addr string) (string, int, error) {
	if addr == "" {
		return "", 0, errors.New("qdrant: empty address (want host:port)")
	}
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		// A bare host (no port): Qdrant's default gRPC port.
		if strings.Contains(err.Error(), "missing port") {
			return strings.Trim(addr, "[]"), DefaultPort, nil
		}
		return "", 0, fmt.Errorf("qdrant: address %q is not host:port: %w", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, fmt.Errorf("qdrant: address %q has a bad port", addr)
	}
	if host == "" {
		host = "localhost"
	}
	return host, port, nil
}

// clientHost is host as qdrant.Config wants it: the client formats "%s:%d", so an IPv6
// literal needs its brackets.
func clientHost(host string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]"
	}
	return host
}

// unreachable reports whether err means Qdrant could not be reached (rather than refused the
// request), while the caller's own context is still alive.
func unreachable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// down says how Qdrant failed a call that unreachable reports: it never answered (a hung server
// or a network that drops packets) or the connection failed.
func (s *Store) down(err error) string {
	if status.Code(err) == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("qdrant at %s did not answer within %v", s.addr, s.timeout)
	}
	return fmt.Sprintf("qdrant at %s is not reachable", s.addr)
}

func (s *Store) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// health runs Qdrant's health check and returns the server version.
func (s *Store) health(ctx context.Context) (string, error) {
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	reply, err := s.client.HealthCheck(cctx)
	if err != nil {
		if unreachable(ctx, err) {
			return "", fmt.Errorf("%s: %w", s.down(err), err)
		}
		return "", fmt.Errorf("qdrant at %s: health check: %w", s.addr, err)
	}
	return reply.GetVersion(), nil
}

// Ready reports whether Qdrant answers its health check and the collection is in place. A
// collection that was in place and is gone is store.ErrLost (once: the next call creates it
// again), so that readiness probes notice a Qdrant restarted without its data even when no
// search or write runs into it.
func (s *Store) Ready(ctx context.Context) error {
	if _, err := s.health(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	ensured := s.ensured
	s.mu.Unlock()
	if ensured {
		ok, err := s.exists(ctx)
		if err != nil {
			return err
		}
		if !ok {
			s.mu.Lock()
			s.ensured = false
			s.mu.Unlock()
			return fmt.Errorf("qdrant at %s: collection %q: %w (Qdrant restarted without its data, or the collection was deleted)", s.addr, s.collection, store.ErrLost)
		}
	}
	return s.ensure(ctx)
}

// ensure creates the collection and its payload index if they are missing, and checks that an
// existing collection has this store's vectors. Racing creators are fine: whoever loses the
// race finds the collection in place.
func (s *Store) ensure(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ensured {
		return nil
	}
	version, err := s.health(ctx)
	if err != nil {
		return err
	}
	if v, err := qc.ParseVersion(version); err == nil {
		if v.Major == 1 && v.Minor < 10 {
			return fmt.Errorf("qdrant at %s is version %s; the Query API needs 1.10 or newer", s.addr, version)
		}
		s.rrfWeights = v.Major > 1 || v.Minor >= 17
	}

	exists, err := s.exists(ctx)
	if err != nil {
		return err
	}
	if !exists {
		if err := s.create(ctx); err != nil {
			// Lost a creation race? Then the collection is there now.
			if again, err2 := s.exists(ctx); err2 != nil || !again {
				return err
			}
		}
	}

	cctx, cancel := s.callCtx(ctx)
	info, err := s.client.GetCollectionInfo(cctx, s.collection)
	cancel()
	if err != nil {
		return fmt.Errorf("qdrant at %s: get collection %q: %w", s.addr, s.collection, err)
	}
	if err := s.checkSchema(info); err != nil {
		return err
	}
	if ps, ok := info.GetPayloadSchema()[payloadServer]; !ok || ps.GetDataType() != qc.PayloadSchemaType_Keyword {
		cctx, cancel := s.callCtx(ctx)
		_, err := s.client.CreateFieldIndex(cctx, &qc.CreateFieldIndexCollection{
			CollectionName: s.collection,
			FieldName:      payloadServer,
			FieldType:      qc.FieldType_FieldTypeKeyword.Enum(),
			Wait:           qc.PtrOf(true),
		})
		cancel()
		if err != nil {
			return fmt.Errorf("qdrant at %s: create payload index %q in collection %q: %w", s.addr, payloadServer, s.collection, err)
		}
	}
	s.ensured = true
	return nil
}

func (s *Store) exists(ctx context.Context) (bool, error) {
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	ok, err := s.client.CollectionExists(cctx, s.collection)
	if err != nil {
		return false, fmt.Errorf("qdrant at %s: check collection %q: %w", s.addr, s.collection, err)
	}
	return ok, nil
}

func (s *Store) create(ctx context.Context) error {
	req := &qc.CreateCollection{CollectionName: s.collection}
	if s.dim > 0 {
		req.VectorsConfig = qc.NewVectorsConfigMap(map[string]*qc.VectorParams{
			DenseVector: {Size: uint64(s.dim), Distance: qc.Distance_Cosine},
		})
	} else {
		// A collection with sparse vectors only: an empty named-vector map.
		req.VectorsConfig = qc.NewVectorsConfigMap(map[string]*qc.VectorParams{})
	}
	if len(s.sparse) > 0 {
		m := make(map[string]*qc.SparseVectorParams, len(s.sparse))
		for _, n := range s.sparse {
			m[n] = &qc.SparseVectorParams{Modifier: qc.Modifier_Idf.Enum()}
		}
		req.SparseVectorsConfig = qc.NewSparseVectorsConfig(m)
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	if err := s.client.CreateCollection(cctx, req); err != nil {
		return fmt.Errorf("qdrant at %s: create collection %q: %w", s.addr, s.collection, err)
	}
	return nil
}

// checkSchema verifies that an existing collection has the vectors this store writes.
func (s *Store) checkSchema(info *qc.CollectionInfo) error {
	params := info.GetConfig().GetParams()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("qdrant: collection %q exists with another schema: %s", s.collection, fmt.Sprintf(format, args...))
	}
	if s.dim > 0 {
		vp := params.GetVectorsConfig().GetParamsMap().GetMap()[DenseVector]
		switch {
		case vp == nil:
			return bad("no dense vector %q", DenseVector)
		case vp.GetSize() != uint64(s.dim):
			return bad("dense vector %q has size %d, want %d", DenseVector, vp.GetSize(), s.dim)
		case vp.GetDistance() != qc.Distance_Cosine:
			return bad("dense vector %q uses %s distance, want Cosine", DenseVector, vp.GetDistance())
		}
	}
	sparse := params.GetSparseVectorsConfig().GetMap()
	for _, n := range s.sparse {
		sp, ok := sparse[n]
		switch {
		case !ok:
			return bad("no sparse vector %q", n)
		case sp.GetModifier() != qc.Modifier_Idf:
			return bad("sparse vector %q has modifier %s, want Idf", n, sp.GetModifier())
		}
	}
	return nil
}

// failed wraps a call's error, naming Qdrant's address (an unreachable Qdrant is otherwise only
// "context deadline exceeded" or a dial error). A missing collection (deleted behind our back,
// or Qdrant restarted without its data) is store.ErrLost, and re-created on the next call.
func (s *Store) failed(ctx context.Context, op string, err error) error {
	if status.Code(err) == codes.NotFound {
		s.mu.Lock()
		s.ensured = false
		s.mu.Unlock()
		return fmt.Errorf("qdrant at %s: %s in collection %q: %w (Qdrant restarted without its data, or the collection was deleted): %w",
			s.addr, op, s.collection, store.ErrLost, err)
	}
	if unreachable(ctx, err) {
		return fmt.Errorf("%s: %s in collection %q: %w", s.down(err), op, s.collection, err)
	}
	return fmt.Errorf("qdrant at %s: %s in collection %q: %w", s.addr, op, s.collection, err)
}

// Upsert writes docs in batches, waiting for each to be applied. A doc's point id comes from
// its tool id, so writing a doc again replaces it, each point whole. An Upsert that fails can
// leave any part of its docs written, now or later (see the package doc); Hashes tells what
// Qdrant keeps.
func (s *Store) Upsert(ctx context.Context, docs []store.Doc) error {
	if len(docs) == 0 {
		return nil
	}
	points := make([]*qc.PointStruct, 0, len(docs))
	for i := range docs {
		p, err := s.point(&docs[i])
		if err != nil {
			return fmt.Errorf("qdrant: upsert into collection %q: %w", s.collection, err)
		}
		points = append(points, p)
	}
	if err := s.ensure(ctx); err != nil {
		return err
	}
	for batch := range slices.Chunk(points, s.upsertBatch) {
		cctx, cancel := s.callCtx(ctx)
		res, err := s.client.Upsert(cctx, &qc.UpsertPoints{
			CollectionName: s.collection,
			Wait:           qc.PtrOf(true),
			Points:         batch,
		})
		cancel()
		if err == nil {
			err = applied(res)
		}
		if err != nil {
			s.gaveUp()
			return s.failed(ctx, "upsert", err)
		}
	}
	return nil
}

// applied checks the status of a write sent with wait. WaitTimeout means Qdrant accepted the
// update and had not applied it when it stopped waiting: it will still be applied.
func applied(res *qc.UpdateResult) error {
	switch st := res.GetStatus(); st {
	case qc.UpdateStatus_Completed, qc.UpdateStatus_Acknowledged:
		return nil
	default:
		return fmt.Errorf("update not confirmed: status %s", st)
	}
}

// gaveUp records a write whose outcome is unknown. Whatever the error, Qdrant may have accepted
// the update before the call failed, and then applies it whether or not the store still waits:
// Collection::update_from_client runs it on a task of its own (lib/collection/src/collection/
// point_ops.rs), and LocalShard::update queues it for the update worker once it is in the WAL
// (lib/collection/src/shards/local_shard/shard_ops.rs).
func (s *Store) gaveUp() {
	s.mu.Lock()
	s.givenUp++
	s.mu.Unlock()
}

const (
	// barrierKey is a payload key the store never writes and barrierID a point id no tool
	// gets (PointID makes version-5 UUIDs; this is the nil UUID): the barrier deletes that key
	// from that point, which changes nothing.
	barrierKey = "toolmesh_barrier"
	barrierID  = "00000000-0000-0000-0000-000000000000"
)

// settle waits until every write the store gave up on has been applied or dropped, so that a
// read after it sees what Qdrant will keep. It sends a barrier: an update that changes nothing,
// with a filter, so that Qdrant sends it to every shard of the collection (PayloadOps
// split_by_shard in lib/collection/src/operations/payload_ops.rs), and waits for it. A shard
// applies its updates one after another in WAL order, so once the barrier is applied everything
// queued before it is too. A write the store gave up on before Qdrant had accepted it is
// dropped with its call and never applied.
func (s *Store) settle(ctx context.Context) error {
	s.mu.Lock()
	givenUp, settled := s.givenUp, s.settled
	s.mu.Unlock()
	if givenUp == settled {
		return nil
	}
	cctx, cancel := s.callCtx(ctx)
	res, err := s.client.DeletePayload(cctx, &qc.DeletePayloadPoints{
		CollectionName: s.collection,
		Wait:           qc.PtrOf(true),
		Keys:           []string{barrierKey},
		PointsSelector: qc.NewPointsSelectorFilter(&qc.Filter{Must: []*qc.Condition{qc.NewHasID(qc.NewIDUUID(barrierID))}}),
	})
	cancel()
	if err == nil {
		err = applied(res)
	}
	if err != nil {
		return s.failed(ctx, "wait until the writes given up on earlier have landed", err)
	}
	s.mu.Lock()
	s.settled = max(s.settled, givenUp)
	s.mu.Unlock()
	return nil
}

func (s *Store) point(d *store.Doc) (*qc.PointStruct, error) {
	if d.ID == "" {
		return nil, errors.New("doc with an empty id")
	}
	vectors := make(map[string]*qc.Vector, 1+len(d.Sparse))
	if len(d.Dense) > 0 {
		if s.dim == 0 {
			return nil, fmt.Errorf("doc %q has a dense vector but the collection has none", d.ID)
		}
		if len(d.Dense) != s.dim {
			return nil, fmt.Errorf("doc %q: dense vector has %d dimensions, want %d", d.ID, len(d.Dense), s.dim)
		}
		vectors[DenseVector] = qc.NewVectorDense(d.Dense)
	}
	for name, sv := range d.Sparse {
		if err := s.checkSparse(name, sv); err != nil {
			return nil, fmt.Errorf("doc %q: %w", d.ID, err)
		}
		if len(sv.Indices) > 0 {
			vectors[name] = qc.NewVectorSparse(sv.Indices, sv.Values)
		}
	}
	toolJSON := ""
	if d.Tool != nil {
		b, err := protojson.Marshal(d.Tool)
		if err != nil {
			return nil, fmt.Errorf("doc %q: encode tool: %w", d.ID, err)
		}
		toolJSON = string(b)
	}
	return &qc.PointStruct{
		Id:      qc.NewIDUUID(PointID(d.ID)),
		Vectors: qc.NewVectorsMap(vectors),
		// Built value by value: qdrant.NewValueMap panics on types it does not know.
		Payload: map[string]*qc.Value{
			payloadID:     qc.NewValueString(d.ID),
			payloadServer: qc.NewValueString(d.Server),
			payloadHash:   qc.NewValueString(d.Hash),
			payloadTool:   qc.NewValueString(toolJSON),
		},
	}, nil
}

func (s *Store) checkSparse(name string, sv store.SparseVector) error {
	if _, ok := slices.BinarySearch(s.sparse, name); !ok {
		return fmt.Errorf("unknown sparse vector %q (the collection has %q)", name, s.sparse)
	}
	if len(sv.Indices) != len(sv.Values) {
		return fmt.Errorf("sparse vector %q has %d indices and %d values", name, len(sv.Indices), len(sv.Values))
	}
	return nil
}

// Delete removes the tools with these ids; ids that are not stored are ignored.
func (s *Store) Delete(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if err := s.ensure(ctx); err != nil {
		return err
	}
	for batch := range slices.Chunk(ids, s.deleteBatch) {
		pids := make([]*qc.PointId, len(batch))
		for i, id := range batch {
			pids[i] = qc.NewIDUUID(PointID(id))
		}
		cctx, cancel := s.callCtx(ctx)
		res, err := s.client.Delete(cctx, &qc.DeletePoints{
			CollectionName: s.collection,
			Wait:           qc.PtrOf(true),
			Points:         qc.NewPointsSelector(pids...),
		})
		cancel()
		if err == nil {
			err = applied(res)
		}
		if err != nil {
			s.gaveUp()
			return s.failed(ctx, "delete", err)
		}
	}
	return nil
}

// Hashes scrolls through every point, reading only the id and hash payload fields. After a
// write the store gave up on (and on the first call, for writes an earlier process left), it
// first waits until Qdrant has applied or dropped it (settle), so that a caller reconciling with
// the result does not miss a write that lands later; it fails while such a write is pending.
func (s *Store) Hashes(ctx context.Context) (map[string]string, error) {
	if err := s.ensure(ctx); err != nil {
		return nil, err
	}
	if err := s.settle(ctx); err != nil {
		return nil, err
	}
	out := make(map[string]string)
	var offset *qc.PointId
	for {
		cctx, cancel := s.callCtx(ctx)
		points, next, err := s.client.ScrollAndOffset(cctx, &qc.ScrollPoints{
			CollectionName: s.collection,
			Offset:         offset,
			Limit:          qc.PtrOf(uint32(s.scrollPage)),
			WithPayload:    qc.NewWithPayloadInclude(payloadID, payloadHash),
			WithVectors:    qc.NewWithVectors(false),
		})
		cancel()
		if err != nil {
			return nil, s.failed(ctx, "scroll", err)
		}
		for _, p := range points {
			if id := p.GetPayload()[payloadID].GetStringValue(); id != "" {
				out[id] = p.GetPayload()[payloadHash].GetStringValue()
			}
		}
		if next == nil || len(points) == 0 {
			return out, nil
		}
		if offset != nil && next.String() == offset.String() {
			return nil, s.failed(ctx, "scroll", fmt.Errorf("next page offset %v repeats", next))
		}
		offset = next
	}
}

type source struct {
	using  string
	query  *qc.Query
	weight float64
}

// Search queries each vector present in q (dense and every non-empty sparse vector); with more
// than one, they are prefetched and fused by RRF on the server. Hits carry Qdrant's scores:
// cosine or IDF-weighted dot product for a single vector, RRF rank scores when fused.
func (s *Store) Search(ctx context.Context, q store.Query) ([]store.Hit, error) {
	if q.Limit <= 0 {
		return nil, nil
	}
	weight := func(name string) float64 {
		if w, ok := q.Weights[name]; ok {
			return w
		}
		return 1
	}
	var sources []source
	if len(q.Dense) > 0 {
		if s.dim == 0 {
			return nil, fmt.Errorf("qdrant: search collection %q: dense query but the collection has no dense vector", s.collection)
		}
		if len(q.Dense) != s.dim {
			return nil, fmt.Errorf("qdrant: search collection %q: dense query has %d dimensions, want %d", s.collection, len(q.Dense), s.dim)
		}
		if w := weight(DenseVector); w > 0 {
			sources = append(sources, source{DenseVector, qc.NewQueryDense(q.Dense), w})
		}
	}
	names := make([]string, 0, len(q.Sparse))
	for n := range q.Sparse {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		sv := q.Sparse[n]
		if err := s.checkSparse(n, sv); err != nil {
			return nil, fmt.Errorf("qdrant: search collection %q: %w", s.collection, err)
		}
		if w := weight(n); w > 0 && len(sv.Indices) > 0 {
			sources = append(sources, source{n, qc.NewQuerySparse(sv.Indices, sv.Values), w})
		}
	}
	if len(sources) == 0 {
		return nil, nil
	}
	if err := s.ensure(ctx); err != nil {
		return nil, err
	}

	req := &qc.QueryPoints{
		CollectionName: s.collection,
		WithPayload:    qc.NewWithPayloadInclude(payloadID, payloadTool),
	}
	if len(q.Servers) > 0 {
		// Qdrant applies the root filter inside every prefetch too.
		req.Filter = &qc.Filter{Must: []*qc.Condition{qc.NewMatchKeywords(payloadServer, q.Servers...)}}
	}
	// Qdrant does not break ties: fused points with equal scores come in any order, and which
	// of them survive the limit varies from one query to the next (rrf_scoring in
	// lib/segment/src/common/reciprocal_rank_fusion.rs); within one vector's ranking they come in
	// the order of Qdrant's internal offsets. The store orders ties by tool id, and asks for
	// tiePad more points than wanted so that the tie at the cut is seen whole. When it is not (the
	// last point returned ties with the last one wanted), it asks again for every candidate:
	// for a fused query all the prefetched points, so the answer is exact; for a single vector
	// at most most points, a tie group reaching past that is cut in Qdrant's order.
	limit := q.Limit + s.tiePad
	most := 4 * (q.Limit + tiePad)
	if len(sources) == 1 {
		req.Query, req.Using = sources[0].query, qc.PtrOf(sources[0].using)
	} else {
		// Each prefetch must reach past the final limit, or fusion sees too few candidates.
		pl := max(4*q.Limit, 64)
		most = len(sources) * pl
		weights := make([]float32, len(sources))
		uniform := true
		for i, src := range sources {
			req.Prefetch = append(req.Prefetch, &qc.PrefetchQuery{Query: src.query, Using: qc.PtrOf(src.using), Limit: qc.PtrOf(uint64(pl))})
			weights[i] = float32(src.weight)
			uniform = uniform && src.weight == sources[0].weight
		}
		s.mu.Lock()
		weighted := s.rrfWeights && !uniform
		s.mu.Unlock()
		if weighted {
			req.Query = qc.NewQueryRRF(&qc.Rrf{Weights: weights})
		} else {
			req.Query = qc.NewQueryFusion(qc.Fusion_RRF)
		}
	}

	var points []*qc.ScoredPoint
	for {
		limit = min(limit, most)
		req.Limit = qc.PtrOf(uint64(limit))
		cctx, cancel := s.callCtx(ctx)
		var err error
		points, err = s.client.Query(cctx, req)
		cancel()
		if err != nil {
			return nil, s.failed(ctx, "query", err)
		}
		slices.SortStableFunc(points, func(a, b *qc.ScoredPoint) int {
			if c := cmp.Compare(b.GetScore(), a.GetScore()); c != 0 {
				return c
			}
			return strings.Compare(a.GetPayload()[payloadID].GetStringValue(), b.GetPayload()[payloadID].GetStringValue())
		})
		if len(points) < limit || limit >= most || points[q.Limit-1].GetScore() > points[len(points)-1].GetScore() {
			break
		}
		limit = most
	}
	if len(points) > q.Limit {
		points = points[:q.Limit]
	}
	hits := make([]store.Hit, 0, len(points))
	for _, p := range points {
		id := p.GetPayload()[payloadID].GetStringValue()
		tool := &toolmeshv1.Tool{}
		if js := p.GetPayload()[payloadTool].GetStringValue(); js != "" {
			if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(js), tool); err != nil {
				return nil, fmt.Errorf("qdrant: search collection %q: decode tool %q: %w", s.collection, id, err)
			}
		}
		hits = append(hits, store.Hit{ID: id, Tool: tool, Score: float64(p.GetScore())})
	}
	return hits, nil
}

// Close closes the connection to Qdrant.
func (s *Store) Close() error {
	return s.client.Close()
}
