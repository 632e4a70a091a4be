// Package qdranttest is a test double of Qdrant: an in-process gRPC server that implements the
// part of Qdrant's API the toolmesh Qdrant store calls, with Qdrant's semantics, built on the
// go-client's generated server interfaces and served on a real loopback listener (plain or
// TLS). It is not Qdrant: use it where no Qdrant server can run, and run the same tests against
// a real one when you can. Qdrant source paths below are of Qdrant v1.17.1.
//
// Implemented (everything else answers Unimplemented):
//   - Qdrant/HealthCheck;
//   - Collections: Create (named dense vectors with Cosine or Dot distance, sparse vectors with
//     or without the IDF modifier; AlreadyExists for a taken name), CollectionExists, Get
//     (vectors config, payload schema, points count), List, Delete;
//   - Points: CreateFieldIndex (recorded in the payload schema), Upsert (a whole point
//     replaced by id; vector names and sizes checked; Cosine vectors normalized as Qdrant does,
//     float32, kept when already of unit length or near zero), Delete and DeletePayload (by ids
//     or by filter), Scroll (id order, payload and vector selectors, offset paging with
//     next_page_offset), Query (nearest by dense cosine or dot, sparse dot product with Qdrant's
//     IDF ln(1 + (N − df + 0.5)/(df + 0.5)) where N is the number of points with that sparse
//     vector and df those with the term, deleted points included until Vacuum, as Qdrant counts
//     them until its optimizer rebuilds the segment; sparse search returns only points sharing
//     a term; nested prefetches; RRF fusion with Qdrant's default k = 2, or Rrf{K, Weights},
//     summed in float32, ties shuffled because Qdrant leaves their order to chance; the root
//     filter applied inside every prefetch as Qdrant does; filters with must/should/must_not
//     over keyword match, match-any, match-except, has_id and nested filters).
//   - Updates are applied in the order they come. StallUpdates holds them up as a busy Qdrant
//     does; an update accepted then is applied later even when its client gave up waiting, as in
//     Qdrant, and ResumeUpdates applies the queue.
//
// Where it differs from Qdrant on purpose (simpler, or more predictable for tests):
//   - An update is applied whole under one lock: a search never sees part of a batch, while
//     Qdrant applies an upsert in chunks of 32 points and a concurrent search can see some of
//     them (upsert_points in lib/shard/src/update.rs).
//   - A SetFault error stands for a call that never reached Qdrant's update queue: the update is
//     not applied. A call Qdrant accepted and then failed (timeout, cancel) is StallUpdates.
//   - Points tied within one vector's ranking come in point-id order; Qdrant's order follows its
//     internal offsets. Dense and sparse scores are computed in float64 and normalization with
//     scalar float32 (Qdrant: float32, SIMD), so the last bits of a score can differ.
//   - All points live in one appendable "segment": a point upserted again replaces its postings
//     in place, so only deletes leave stale IDF counts, until Vacuum; in Qdrant a point updated
//     after its segment was optimized leaves its old copy counting too, and the optimizer vacuums
//     only segments of ≥ 1000 vectors with ≥ 20% deleted.
//   - Queued updates are kept over Stop and Restart and applied only by ResumeUpdates (Qdrant
//     replays them from its WAL when it starts); API keys are not checked.
//
// Ignored: consistency, shard keys, search params, timeouts, score thresholds.
package qdranttest

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	qc "github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// DefaultRRFK is the k of Qdrant's reciprocal rank fusion when the query does not set one
// (DEFAULT_RRF_K in qdrant/lib/segment/src/common/reciprocal_rank_fusion.rs): a point at
// 0-based rank r in a prefetch scores 1/(r + k).
const DefaultRRFK = 2

// Version is the Qdrant version the double reports in its health check.
const Version = "1.17.0"

// Double is a running test double of Qdrant's gRPC API.
type Double struct {
	addr string

	// srvMu guards the serving side, which Stop and Restart replace while the data stays.
	srvMu sync.Mutex
	srv   *grpc.Server
	done  chan struct{}

	// tls, when set, is the server's certificate: the double serves gRPC over TLS.
	tls *tls.Config

	mu          sync.Mutex
	collections map[string]*collection
	calls       map[string]int
	opID        uint64
	fault       func(ctx context.Context, fullMethod string, call int) error
	// stalled holds back every update (see StallUpdates); queue holds the updates accepted and
	// not yet applied, in the order they came.
	stalled bool
	queue   []*update
}

// Start serves a new Double on a loopback port and stops it when the test ends.
func Start(tb testing.TB) *Double {
	tb.Helper()
	d, err := Listen("127.0.0.1:0")
	if err != nil {
		tb.Fatalf("qdranttest: %v", err)
	}
	tb.Cleanup(d.Close)
	return d
}

// StartTLS is Start serving gRPC over TLS with cert, as Qdrant does with service.enable_tls.
func StartTLS(tb testing.TB, cert tls.Certificate) *Double {
	tb.Helper()
	d, err := ListenTLS("127.0.0.1:0", cert)
	if err != nil {
		tb.Fatalf("qdranttest: %v", err)
	}
	tb.Cleanup(d.Close)
	return d
}

// Listen serves a new Double on addr (host:port; port 0 picks one).
func Listen(addr string) (*Double, error) { return listen(addr, nil) }

// ListenTLS is Listen serving gRPC over TLS with cert.
func ListenTLS(addr string, cert tls.Certificate) (*Double, error) {
	return listen(addr, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
}

func listen(addr string, tlsConfig *tls.Config) (*Double, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	d := &Double{
		addr:        lis.Addr().String(),
		tls:         tlsConfig,
		collections: make(map[string]*collection),
		calls:       make(map[string]int),
	}
	d.serve(lis)
	return d, nil
}

func (d *Double) serve(lis net.Listener) {
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(d.count),
		// The go-client pings every 10 s even without calls in flight; grpc-go's default policy
		// would answer that with GOAWAY "too_many_pings". Qdrant accepts it.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
	}
	if d.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(d.tls)))
	}
	d.srv = grpc.NewServer(opts...)
	qc.RegisterQdrantServer(d.srv, healthService{})
	qc.RegisterCollectionsServer(d.srv, collectionsService{d: d})
	qc.RegisterPointsServer(d.srv, pointsService{d: d})
	srv, done := d.srv, make(chan struct{})
	d.done = done
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
}

// Addr is the host:port the double listens on.
func (d *Double) Addr() string { return d.addr }

// Close stops the server at once (in-flight calls fail, as when Qdrant goes away). It is Stop:
// the data stays, so Restart can bring the same Qdrant back.
func (d *Double) Close() { d.Stop() }

// Stop stops serving at once, like a Qdrant process that was killed: in-flight calls fail,
// new connections are refused. The collections and points stay, as on Qdrant's disk.
func (d *Double) Stop() {
	d.srvMu.Lock()
	defer d.srvMu.Unlock()
	d.srv.Stop()
	<-d.done
}

// Restart serves the same data on the same address again after Stop, like Qdrant coming back
// with its storage. The port of a stopped server can take a moment to free, so it retries for
// a second.
func (d *Double) Restart() error {
	d.srvMu.Lock()
	defer d.srvMu.Unlock()
	select {
	case <-d.done:
	default:
		return fmt.Errorf("qdranttest: restart of a double that is still serving on %s", d.addr)
	}
	var lis net.Listener
	var err error
	for range 50 {
		if lis, err = net.Listen("tcp", d.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("qdranttest: restart on %s: %w", d.addr, err)
	}
	d.serve(lis)
	return nil
}

// SetFault makes every later call ask f first: a non-nil error is returned to the client
// instead of handling the call. call counts the calls of fullMethod so far, this one included
// (the same count as Calls). f runs on the call's goroutine with the call's context, so it may
// also block, to hold a call in flight or hang like a stuck server. nil removes the fault.
func (d *Double) SetFault(f func(ctx context.Context, fullMethod string, call int) error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fault = f
}

// StallUpdates makes the double behave like a Qdrant whose update queue does not move (an
// optimizer or a slow disk holding it up): from now on every update (upsert, delete, payload
// change, field index) is checked and accepted but not applied. Its call answers once the update
// is applied, or fails when the client gives up (deadline or cancel) — and the update stays
// queued, because Qdrant applies an update it has accepted whether or not anyone still waits:
// Collection::update_from_client runs it on a spawned task (lib/collection/src/collection/
// point_ops.rs) and LocalShard::update hands it to the update worker after writing the WAL
// (lib/collection/src/shards/local_shard/shard_ops.rs). Reads meanwhile see the state without
// the queued updates. A call with wait=false is answered Acknowledged at once, as Qdrant does.
func (d *Double) StallUpdates() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stalled = true
}

// ResumeUpdates applies the queued updates in the order they came, answers the calls still
// waiting for them, and ends the stall. It returns how many updates it applied.
func (d *Double) ResumeUpdates() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := len(d.queue)
	for _, u := range d.queue {
		u.apply()
		u.result = d.nextOp()
		close(u.done)
	}
	d.queue, d.stalled = nil, false
	return n
}

// Queued is how many accepted updates wait to be applied.
func (d *Double) Queued() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.queue)
}

// Vacuum drops the deleted points from the IDF statistics of every collection, as Qdrant's
// optimizer does when it rebuilds a segment (see collection.deleted).
func (d *Double) Vacuum() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.collections {
		c.deleted = nil
	}
}

// update is an update accepted while updates are stalled.
type update struct {
	apply  func()
	done   chan struct{}
	result *qc.UpdateResult
}

// write runs an update: check runs with d.mu held and returns the update to apply, or the error
// that rejects the call (nothing applied). The update is applied at once, or queued behind the
// updates already waiting (see StallUpdates).
func (d *Double) write(ctx context.Context, wait bool, check func() (apply func(), err error)) (*qc.PointsOperationResponse, error) {
	d.mu.Lock()
	apply, err := check()
	if err != nil {
		d.mu.Unlock()
		return nil, err
	}
	if !d.stalled && len(d.queue) == 0 {
		apply()
		res := d.nextOp()
		d.mu.Unlock()
		return &qc.PointsOperationResponse{Result: res}, nil
	}
	u := &update{apply: apply, done: make(chan struct{})}
	d.queue = append(d.queue, u)
	d.opID++
	ack := &qc.UpdateResult{OperationId: qc.PtrOf(d.opID), Status: qc.UpdateStatus_Acknowledged}
	d.mu.Unlock()
	if !wait {
		return &qc.PointsOperationResponse{Result: ack}, nil
	}
	select {
	case <-u.done:
		return &qc.PointsOperationResponse{Result: u.result}, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// Calls is how many times the RPC fullMethod (e.g. qdrant.Collections_Create_FullMethodName)
// was called.
func (d *Double) Calls(fullMethod string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[fullMethod]
}

func (d *Double) count(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	d.mu.Lock()
	d.calls[info.FullMethod]++
	n, fault := d.calls[info.FullMethod], d.fault
	d.mu.Unlock()
	if fault != nil {
		if err := fault(ctx, info.FullMethod, n); err != nil {
			return nil, err
		}
	}
	return h(ctx, req)
}

// ---------------------------------------------------------------------------------------------
// Data model.

type denseParams struct {
	size     int
	distance qc.Distance
}

type collection struct {
	name       string
	dense      map[string]denseParams
	sparse     map[string]qc.Modifier
	points     map[pointKey]*point
	fieldIndex map[string]qc.FieldType
	// deleted are the points deleted since the last Vacuum. Qdrant only marks a deleted point
	// in its segment and leaves its vectors, so its sparse postings keep counting in the IDF
	// (N and df) until the optimizer rebuilds the segment (delete_point_internal in
	// lib/segment/src/segment/segment_ops.rs; fill_idf_statistics in
	// lib/segment/src/index/sparse_index/sparse_vector_index.rs). A point upserted again in
	// place replaces its postings, as in Qdrant's appendable segments.
	deleted []*point
}

type point struct {
	key     pointKey
	id      *qc.PointId
	dense   map[string][]float32 // normalized for cosine
	sparse  map[string]sparseVec
	payload map[string]*qc.Value
}

type sparseVec struct {
	indices []uint32
	values  []float32
}

// pointKey orders points as Qdrant does: numeric ids first, by value, then UUIDs by their
// 128-bit value (the canonical hex form sorts the same way).
type pointKey struct {
	isUUID bool
	num    uint64
	uuid   string
}

func (a pointKey) compare(b pointKey) int {
	if a.isUUID != b.isUUID {
		if a.isUUID {
			return 1
		}
		return -1
	}
	if a.isUUID {
		return strings.Compare(a.uuid, b.uuid)
	}
	return cmp.Compare(a.num, b.num)
}

func keyOf(id *qc.PointId) (pointKey, error) {
	switch v := id.GetPointIdOptions().(type) {
	case *qc.PointId_Num:
		return pointKey{num: v.Num}, nil
	case *qc.PointId_Uuid:
		hexs := strings.ToLower(strings.ReplaceAll(strings.Trim(v.Uuid, "{}"), "-", ""))
		hexs = strings.TrimPrefix(hexs, "urn:uuid:")
		if b, err := hex.DecodeString(hexs); err != nil || len(b) != 16 {
			return pointKey{}, status.Errorf(codes.InvalidArgument, "Unable to parse UUID: %s", v.Uuid)
		}
		return pointKey{isUUID: true, uuid: hexs[0:8] + "-" + hexs[8:12] + "-" + hexs[12:16] + "-" + hexs[16:20] + "-" + hexs[20:32]}, nil
	default:
		return pointKey{}, status.Error(codes.InvalidArgument, "point id is empty")
	}
}

func (k pointKey) id() *qc.PointId {
	if k.isUUID {
		return qc.NewIDUUID(k.uuid)
	}
	return qc.NewIDNum(k.num)
}

func (d *Double) collection(name string) (*collection, error) {
	c, ok := d.collections[name]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "Not found: Collection `%s` doesn't exist!", name)
	}
	return c, nil
}

func (d *Double) nextOp() *qc.UpdateResult {
	d.opID++
	return &qc.UpdateResult{OperationId: qc.PtrOf(d.opID), Status: qc.UpdateStatus_Completed}
}

// ---------------------------------------------------------------------------------------------
// Qdrant service.

type healthService struct {
	qc.UnimplementedQdrantServer
}

func (healthService) HealthCheck(context.Context, *qc.HealthCheckRequest) (*qc.HealthCheckReply, error) {
	return &qc.HealthCheckReply{Title: "qdranttest - a test double of qdrant", Version: Version}, nil
}

// ---------------------------------------------------------------------------------------------
// Collections service.

type collectionsService struct {
	qc.UnimplementedCollectionsServer
	d *Double
}

func (s collectionsService) Create(_ context.Context, req *qc.CreateCollection) (*qc.CollectionOperationResponse, error) {
	name := req.GetCollectionName()
	if name == "" || len(name) > 255 || strings.ContainsAny(name, "/\\\x00") {
		return nil, status.Errorf(codes.InvalidArgument, "Wrong input: collection name %q is invalid", name)
	}
	c := &collection{
		name:       name,
		dense:      make(map[string]denseParams),
		sparse:     make(map[string]qc.Modifier),
		points:     make(map[pointKey]*point),
		fieldIndex: make(map[string]qc.FieldType),
	}
	addDense := func(name string, p *qc.VectorParams) error {
		if p.GetSize() == 0 {
			return status.Errorf(codes.InvalidArgument, "Wrong input: vector %q: size must be positive", name)
		}
		switch p.GetDistance() {
		case qc.Distance_Cosine, qc.Distance_Dot:
		default:
			return status.Errorf(codes.Unimplemented, "qdranttest: distance %s is not implemented", p.GetDistance())
		}
		if p.MultivectorConfig != nil {
			return status.Error(codes.Unimplemented, "qdranttest: multivectors are not implemented")
		}
		c.dense[name] = denseParams{size: int(p.GetSize()), distance: p.GetDistance()}
		return nil
	}
	switch vc := req.GetVectorsConfig().GetConfig().(type) {
	case *qc.VectorsConfig_Params:
		if err := addDense("", vc.Params); err != nil {
			return nil, err
		}
	case *qc.VectorsConfig_ParamsMap:
		for n, p := range vc.ParamsMap.GetMap() {
			if err := addDense(n, p); err != nil {
				return nil, err
			}
		}
	}
	for n, p := range req.GetSparseVectorsConfig().GetMap() {
		if _, dup := c.dense[n]; dup {
			return nil, status.Errorf(codes.InvalidArgument, "Wrong input: vector name %q is used by a dense and a sparse vector", n)
		}
		c.sparse[n] = p.GetModifier()
	}

	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if _, ok := s.d.collections[name]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "Wrong input: Collection `%s` already exists!", name)
	}
	s.d.collections[name] = c
	return &qc.CollectionOperationResponse{Result: true}, nil
}

func (s collectionsService) CollectionExists(_ context.Context, req *qc.CollectionExistsRequest) (*qc.CollectionExistsResponse, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	_, ok := s.d.collections[req.GetCollectionName()]
	return &qc.CollectionExistsResponse{Result: &qc.CollectionExists{Exists: ok}}, nil
}

func (s collectionsService) Get(_ context.Context, req *qc.GetCollectionInfoRequest) (*qc.GetCollectionInfoResponse, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	c, err := s.d.collection(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	dense := make(map[string]*qc.VectorParams, len(c.dense))
	for n, p := range c.dense {
		dense[n] = &qc.VectorParams{Size: uint64(p.size), Distance: p.distance}
	}
	sparse := make(map[string]*qc.SparseVectorParams, len(c.sparse))
	for n, m := range c.sparse {
		sparse[n] = &qc.SparseVectorParams{Modifier: m.Enum()}
	}
	schema := make(map[string]*qc.PayloadSchemaInfo, len(c.fieldIndex))
	for f, t := range c.fieldIndex {
		var n uint64
		for _, p := range c.points {
			if _, ok := p.payload[f]; ok {
				n++
			}
		}
		schema[f] = &qc.PayloadSchemaInfo{DataType: schemaType(t), Points: qc.PtrOf(n)}
	}
	params := &qc.CollectionParams{ShardNumber: 1, SparseVectorsConfig: qc.NewSparseVectorsConfig(sparse)}
	if p, ok := dense[""]; ok && len(dense) == 1 {
		params.VectorsConfig = qc.NewVectorsConfig(p)
	} else {
		params.VectorsConfig = qc.NewVectorsConfigMap(dense)
	}
	return &qc.GetCollectionInfoResponse{Result: &qc.CollectionInfo{
		Status:        qc.CollectionStatus_Green,
		Config:        &qc.CollectionConfig{Params: params},
		PayloadSchema: schema,
		PointsCount:   qc.PtrOf(uint64(len(c.points))),
	}}, nil
}

func schemaType(t qc.FieldType) qc.PayloadSchemaType {
	switch t {
	case qc.FieldType_FieldTypeKeyword:
		return qc.PayloadSchemaType_Keyword
	case qc.FieldType_FieldTypeInteger:
		return qc.PayloadSchemaType_Integer
	case qc.FieldType_FieldTypeBool:
		return qc.PayloadSchemaType_Bool
	default:
		return qc.PayloadSchemaType_UnknownType
	}
}

func (s collectionsService) List(context.Context, *qc.ListCollectionsRequest) (*qc.ListCollectionsResponse, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	out := &qc.ListCollectionsResponse{}
	for _, n := range slices.Sorted(maps.Keys(s.d.collections)) {
		out.Collections = append(out.Collections, &qc.CollectionDescription{Name: n})
	}
	return out, nil
}

func (s collectionsService) Delete(_ context.Context, req *qc.DeleteCollection) (*qc.CollectionOperationResponse, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	_, ok := s.d.collections[req.GetCollectionName()]
	delete(s.d.collections, req.GetCollectionName())
	return &qc.CollectionOperationResponse{Result: ok}, nil
}

// ---------------------------------------------------------------------------------------------
// Points service.

type pointsService struct {
	qc.UnimplementedPointsServer
	d *Double
}

func (s pointsService) CreateFieldIndex(ctx context.Context, req *qc.CreateFieldIndexCollection) (*qc.PointsOperationResponse, error) {
	return s.d.write(ctx, req.GetWait(), func() (func(), error) {
		c, err := s.d.collection(req.GetCollectionName())
		if err != nil {
			return nil, err
		}
		if req.GetFieldName() == "" {
			return nil, status.Error(codes.InvalidArgument, "Wrong input: empty field name")
		}
		if req.FieldType == nil {
			return nil, status.Error(codes.InvalidArgument, "Wrong input: field type is required")
		}
		return func() { c.fieldIndex[req.GetFieldName()] = req.GetFieldType() }, nil
	})
}

func (s pointsService) Upsert(ctx context.Context, req *qc.UpsertPoints) (*qc.PointsOperationResponse, error) {
	if req.UpdateFilter != nil || req.UpdateMode != nil {
		return nil, status.Error(codes.Unimplemented, "qdranttest: conditional upserts are not implemented")
	}
	return s.d.write(ctx, req.GetWait(), func() (func(), error) {
		c, err := s.d.collection(req.GetCollectionName())
		if err != nil {
			return nil, err
		}
		// Check the whole batch before applying any of it.
		pts := make([]*point, 0, len(req.GetPoints()))
		for _, ps := range req.GetPoints() {
			p, err := c.newPoint(ps)
			if err != nil {
				return nil, err
			}
			pts = append(pts, p)
		}
		return func() {
			for _, p := range pts {
				c.points[p.key] = p
			}
		}, nil
	})
}

func (c *collection) newPoint(ps *qc.PointStruct) (*point, error) {
	key, err := keyOf(ps.GetId())
	if err != nil {
		return nil, err
	}
	p := &point{
		key:     key,
		id:      key.id(),
		dense:   make(map[string][]float32),
		sparse:  make(map[string]sparseVec),
		payload: make(map[string]*qc.Value, len(ps.GetPayload())),
	}
	for k, v := range ps.GetPayload() {
		p.payload[k] = proto.Clone(v).(*qc.Value)
	}
	var vectors map[string]*qc.Vector
	switch vs := ps.GetVectors().GetVectorsOptions().(type) {
	case nil:
	case *qc.Vectors_Vector:
		vectors = map[string]*qc.Vector{"": vs.Vector}
	case *qc.Vectors_Vectors:
		vectors = vs.Vectors.GetVectors()
	}
	for name, v := range vectors {
		switch vv := v.GetVector().(type) {
		case *qc.Vector_Dense:
			dp, ok := c.dense[name]
			if !ok {
				return nil, status.Errorf(codes.InvalidArgument, "Wrong input: Not existing vector name error: %s", name)
			}
			data := vv.Dense.GetData()
			if len(data) != dp.size {
				return nil, status.Errorf(codes.InvalidArgument, "Wrong input: Vector dimension error: expected dim: %d, got %d", dp.size, len(data))
			}
			data = slices.Clone(data)
			if dp.distance == qc.Distance_Cosine {
				normalize(data)
			}
			p.dense[name] = data
		case *qc.Vector_Sparse:
			if _, ok := c.sparse[name]; !ok {
				return nil, status.Errorf(codes.InvalidArgument, "Wrong input: Not existing vector name error: %s", name)
			}
			sv, err := checkSparse(vv.Sparse.GetIndices(), vv.Sparse.GetValues())
			if err != nil {
				return nil, err
			}
			p.sparse[name] = sv
		default:
			return nil, status.Errorf(codes.Unimplemented, "qdranttest: vector %q: only dense and sparse vectors are implemented", name)
		}
	}
	return p, nil
}

func checkSparse(indices []uint32, values []float32) (sparseVec, error) {
	if len(indices) != len(values) {
		return sparseVec{}, status.Errorf(codes.InvalidArgument, "Wrong input: Sparse vector has %d indices and %d values", len(indices), len(values))
	}
	seen := make(map[uint32]bool, len(indices))
	for _, i := range indices {
		if seen[i] {
			return sparseVec{}, status.Errorf(codes.InvalidArgument, "Wrong input: Sparse vector indices must be unique, %d repeats", i)
		}
		seen[i] = true
	}
	return sparseVec{indices: slices.Clone(indices), values: slices.Clone(values)}, nil
}

// normalize is Qdrant's preprocessing of a vector for Cosine distance (cosine_preprocess in
// lib/segment/src/spaces/simple.rs): the vector divided by its length, in float32, unless its
// squared length is below float32's epsilon or already within 1e-6 of 1
// (is_length_zero_or_normalized in lib/segment/src/spaces/tools.rs), when it is kept as it is.
// Qdrant sums the squares with SIMD on most CPUs, so its last bit can differ from this one's.
func normalize(v []float32) {
	var sq float32
	for _, x := range v {
		sq += x * x
	}
	if sq < epsilon32 || math.Abs(float64(sq)-1) <= 1e-6 {
		return
	}
	n := float32(math.Sqrt(float64(sq)))
	for i := range v {
		v[i] /= n
	}
}

// epsilon32 is Rust's f32::EPSILON, the gap between 1 and the next float32.
const epsilon32 = 1.1920929e-07

func (s pointsService) Delete(ctx context.Context, req *qc.DeletePoints) (*qc.PointsOperationResponse, error) {
	return s.d.writePoints(ctx, req.GetWait(), req.GetCollectionName(), req.GetPoints(), func(c *collection, p *point) {
		delete(c.points, p.key)
		c.deleted = append(c.deleted, p)
	})
}

func (s pointsService) DeletePayload(ctx context.Context, req *qc.DeletePayloadPoints) (*qc.PointsOperationResponse, error) {
	return s.d.writePoints(ctx, req.GetWait(), req.GetCollectionName(), req.GetPointsSelector(), func(_ *collection, p *point) {
		for _, k := range req.GetKeys() {
			delete(p.payload, k)
		}
	})
}

// writePoints runs an update that changes each point sel picks in the collection name.
func (d *Double) writePoints(ctx context.Context, wait bool, name string, sel *qc.PointsSelector, change func(*collection, *point)) (*qc.PointsOperationResponse, error) {
	return d.write(ctx, wait, func() (func(), error) {
		c, err := d.collection(name)
		if err != nil {
			return nil, err
		}
		match, err := selector(sel)
		if err != nil {
			return nil, err
		}
		return func() {
			for _, p := range c.points {
				if ok, _ := match(p); ok {
					change(c, p)
				}
			}
		}, nil
	})
}

// selector is the points a PointsSelector picks: a list of ids or a filter. Its ids and filter
// are checked here, so that matching cannot fail later.
func selector(sel *qc.PointsSelector) (func(*point) (bool, error), error) {
	switch o := sel.GetPointsSelectorOneOf().(type) {
	case *qc.PointsSelector_Points:
		keys := make(map[pointKey]bool, len(o.Points.GetIds()))
		for _, id := range o.Points.GetIds() {
			k, err := keyOf(id)
			if err != nil {
				return nil, err
			}
			keys[k] = true
		}
		return func(p *point) (bool, error) { return keys[p.key], nil }, nil
	case *qc.PointsSelector_Filter:
		if _, err := evalFilter(o.Filter, &point{payload: map[string]*qc.Value{}}); err != nil {
			return nil, err
		}
		return func(p *point) (bool, error) { return evalFilter(o.Filter, p) }, nil
	default:
		return nil, status.Error(codes.InvalidArgument, "Wrong input: points selector is empty")
	}
}

func (s pointsService) Scroll(_ context.Context, req *qc.ScrollPoints) (*qc.ScrollResponse, error) {
	if req.OrderBy != nil {
		return nil, status.Error(codes.Unimplemented, "qdranttest: scroll order_by is not implemented")
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	c, err := s.d.collection(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	limit := 10
	if req.Limit != nil {
		limit = int(req.GetLimit())
	}
	if limit <= 0 {
		return nil, status.Error(codes.InvalidArgument, "Wrong input: limit must be positive")
	}
	var from *pointKey
	if req.Offset != nil {
		k, err := keyOf(req.GetOffset())
		if err != nil {
			return nil, err
		}
		from = &k
	}
	var matched []*point
	for _, p := range c.sortedPoints() {
		if from != nil && p.key.compare(*from) < 0 {
			continue
		}
		ok, err := evalFilter(req.GetFilter(), p)
		if err != nil {
			return nil, err
		}
		if ok {
			matched = append(matched, p)
		}
	}
	out := &qc.ScrollResponse{}
	for i, p := range matched {
		if i == limit {
			out.NextPageOffset = p.key.id()
			break
		}
		rp := &qc.RetrievedPoint{Id: p.key.id(), Payload: selectPayload(req.GetWithPayload(), p.payload)}
		if wv := selectVectors(req.WithVectors, p); wv != nil {
			rp.Vectors = wv
		}
		out.Result = append(out.Result, rp)
	}
	return out, nil
}

func (c *collection) sortedPoints() []*point {
	pts := make([]*point, 0, len(c.points))
	for _, p := range c.points {
		pts = append(pts, p)
	}
	slices.SortFunc(pts, func(a, b *point) int { return a.key.compare(b.key) })
	return pts
}

func selectPayload(sel *qc.WithPayloadSelector, payload map[string]*qc.Value) map[string]*qc.Value {
	var keep func(string) bool
	switch o := sel.GetSelectorOptions().(type) {
	case nil:
		return nil
	case *qc.WithPayloadSelector_Enable:
		if !o.Enable {
			return nil
		}
		keep = func(string) bool { return true }
	case *qc.WithPayloadSelector_Include:
		keep = func(k string) bool { return slices.Contains(o.Include.GetFields(), k) }
	case *qc.WithPayloadSelector_Exclude:
		keep = func(k string) bool { return !slices.Contains(o.Exclude.GetFields(), k) }
	}
	out := make(map[string]*qc.Value)
	for k, v := range payload {
		if keep(k) {
			out[k] = proto.Clone(v).(*qc.Value)
		}
	}
	return out
}

func selectVectors(sel *qc.WithVectorsSelector, p *point) *qc.VectorsOutput {
	var keep func(string) bool
	switch o := sel.GetSelectorOptions().(type) {
	case nil:
		return nil
	case *qc.WithVectorsSelector_Enable:
		if !o.Enable {
			return nil
		}
		keep = func(string) bool { return true }
	case *qc.WithVectorsSelector_Include:
		keep = func(n string) bool { return slices.Contains(o.Include.GetNames(), n) }
	}
	named := make(map[string]*qc.VectorOutput)
	for n, v := range p.dense {
		if keep(n) {
			named[n] = &qc.VectorOutput{Vector: &qc.VectorOutput_Dense{Dense: &qc.DenseVector{Data: slices.Clone(v)}}}
		}
	}
	for n, v := range p.sparse {
		if keep(n) {
			named[n] = &qc.VectorOutput{Vector: &qc.VectorOutput_Sparse{Sparse: &qc.SparseVector{Indices: slices.Clone(v.indices), Values: slices.Clone(v.values)}}}
		}
	}
	return &qc.VectorsOutput{VectorsOptions: &qc.VectorsOutput_Vectors{Vectors: &qc.NamedVectorsOutput{Vectors: named}}}
}

// ---------------------------------------------------------------------------------------------
// Query.

type scored struct {
	p     *point
	score float64
}

func (s pointsService) Query(_ context.Context, req *qc.QueryPoints) (*qc.QueryResponse, error) {
	if req.LookupFrom != nil {
		return nil, status.Error(codes.Unimplemented, "qdranttest: lookup_from is not implemented")
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	c, err := s.d.collection(req.GetCollectionName())
	if err != nil {
		return nil, err
	}
	limit, offset := uint64(10), req.GetOffset()
	if req.Limit != nil {
		limit = req.GetLimit()
	}
	res, err := c.run(req.GetPrefetch(), req.GetQuery(), req.Using, req.GetFilter(), limit+offset)
	if err != nil {
		return nil, err
	}
	if uint64(len(res)) > offset {
		res = res[offset:]
	} else {
		res = nil
	}
	out := &qc.QueryResponse{}
	for _, r := range res {
		sp := &qc.ScoredPoint{
			Id:      r.p.key.id(),
			Score:   float32(r.score),
			Payload: selectPayload(req.GetWithPayload(), r.p.payload),
			Version: 1,
		}
		if wv := selectVectors(req.WithVectors, r.p); wv != nil {
			sp.Vectors = wv
		}
		out.Result = append(out.Result, sp)
	}
	return out, nil
}

// run evaluates one level of a query: its prefetches first (each with the filter of this level
// and its own), then the query over their results, or over the whole collection without
// prefetches.
func (c *collection) run(prefetches []*qc.PrefetchQuery, q *qc.Query, using *string, filter *qc.Filter, limit uint64) ([]scored, error) {
	if len(prefetches) == 0 {
		var candidates []*point
		for _, p := range c.sortedPoints() {
			ok, err := evalFilter(filter, p)
			if err != nil {
				return nil, err
			}
			if ok {
				candidates = append(candidates, p)
			}
		}
		var res []scored
		switch qv := q.GetVariant().(type) {
		case nil:
			// No query: points in id order.
			for _, p := range candidates {
				res = append(res, scored{p: p})
			}
		case *qc.Query_Nearest:
			var err error
			if res, err = c.nearest(qv.Nearest, using, candidates); err != nil {
				return nil, err
			}
		case *qc.Query_Fusion, *qc.Query_Rrf:
			return nil, status.Error(codes.InvalidArgument, "Wrong input: fusion queries need prefetches")
		default:
			return nil, status.Errorf(codes.Unimplemented, "qdranttest: query %T is not implemented", qv)
		}
		return truncate(res, limit), nil
	}

	lists := make([][]scored, 0, len(prefetches))
	for _, pf := range prefetches {
		pl := uint64(10)
		if pf.Limit != nil {
			pl = pf.GetLimit()
		}
		l, err := c.run(pf.GetPrefetch(), pf.GetQuery(), pf.Using, andFilters(filter, pf.GetFilter()), pl)
		if err != nil {
			return nil, err
		}
		lists = append(lists, l)
	}
	var res []scored
	switch qv := q.GetVariant().(type) {
	case *qc.Query_Fusion:
		if qv.Fusion != qc.Fusion_RRF {
			return nil, status.Errorf(codes.Unimplemented, "qdranttest: fusion %s is not implemented", qv.Fusion)
		}
		res = rrf(lists, DefaultRRFK, nil)
	case *qc.Query_Rrf:
		k := DefaultRRFK
		if qv.Rrf.K != nil {
			k = int(qv.Rrf.GetK())
		}
		w := qv.Rrf.GetWeights()
		if len(w) > 0 && len(w) != len(lists) {
			return nil, status.Errorf(codes.InvalidArgument, "Wrong input: Number of weights in RRF should match number of pre-fetches: got %d, expected %d", len(w), len(lists))
		}
		res = rrf(lists, k, w)
	case *qc.Query_Nearest:
		// Rescore the union of the prefetched points.
		seen := make(map[pointKey]bool)
		var candidates []*point
		for _, l := range lists {
			for _, r := range l {
				if !seen[r.p.key] {
					seen[r.p.key] = true
					candidates = append(candidates, r.p)
				}
			}
		}
		var err error
		if res, err = c.nearest(qv.Nearest, using, candidates); err != nil {
			return nil, err
		}
	default:
		return nil, status.Errorf(codes.Unimplemented, "qdranttest: query %T over prefetches is not implemented", qv)
	}
	return truncate(res, limit), nil
}

func truncate(res []scored, limit uint64) []scored {
	if uint64(len(res)) > limit {
		return res[:limit]
	}
	return res
}

// rrf fuses ranked lists as Qdrant does (rrf_scoring in
// lib/segment/src/common/reciprocal_rank_fusion.rs): a point at 0-based position r in a list with
// weight w gains 1/((r+1)/w + k − 1), which is 1/(r + k) for w = 1, summed in float32; the sums
// sort descending. Qdrant does not break ties (a hash map's order, then an unstable sort), so
// tied points come in any order and which of them survive a limit varies; the double shuffles
// them so that a caller relying on their order fails here too.
func rrf(lists [][]scored, k int, weights []float32) []scored {
	type fused struct {
		p     *point
		score float32
	}
	byKey := make(map[pointKey]*fused)
	var order []pointKey
	for i, l := range lists {
		w := float32(1)
		if len(weights) > 0 {
			w = weights[i]
		}
		for pos, r := range l {
			var add float32
			if w > 0 {
				add = 1 / (float32(pos+1)/w + float32(k) - 1)
			}
			if f, ok := byKey[r.p.key]; ok {
				f.score += add
				continue
			}
			byKey[r.p.key] = &fused{p: r.p, score: add}
			order = append(order, r.p.key)
		}
	}
	out := make([]scored, 0, len(order))
	for _, k := range order {
		out = append(out, scored{p: byKey[k].p, score: float64(byKey[k].score)})
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	slices.SortStableFunc(out, func(a, b scored) int { return cmp.Compare(b.score, a.score) })
	return out
}

func (c *collection) nearest(in *qc.VectorInput, using *string, candidates []*point) ([]scored, error) {
	name := ""
	if using != nil {
		name = *using
	}
	var res []scored
	switch v := in.GetVariant().(type) {
	case *qc.VectorInput_Dense:
		dp, ok := c.dense[name]
		if !ok {
			return nil, status.Errorf(codes.InvalidArgument, "Wrong input: Not existing vector name error: %s", name)
		}
		q := slices.Clone(v.Dense.GetData())
		if len(q) != dp.size {
			return nil, status.Errorf(codes.InvalidArgument, "Wrong input: Vector dimension error: expected dim: %d, got %d", dp.size, len(q))
		}
		if dp.distance == qc.Distance_Cosine {
			normalize(q)
		}
		for _, p := range candidates {
			dv, ok := p.dense[name]
			if !ok {
				continue
			}
			var dot float64
			for i := range q {
				dot += float64(q[i]) * float64(dv[i])
			}
			res = append(res, scored{p: p, score: dot})
		}
	case *qc.VectorInput_Sparse:
		mod, ok := c.sparse[name]
		if !ok {
			return nil, status.Errorf(codes.InvalidArgument, "Wrong input: Not existing vector name error: %s", name)
		}
		q, err := checkSparse(v.Sparse.GetIndices(), v.Sparse.GetValues())
		if err != nil {
			return nil, err
		}
		weight := make(map[uint32]float64, len(q.indices))
		for i, idx := range q.indices {
			weight[idx] = float64(q.values[i])
		}
		if mod == qc.Modifier_Idf {
			c.applyIDF(name, weight)
		}
		for _, p := range candidates {
			sv, ok := p.sparse[name]
			if !ok {
				continue
			}
			var dot float64
			overlap := false
			for i, idx := range sv.indices {
				if w, ok := weight[idx]; ok {
					dot += w * float64(sv.values[i])
					overlap = true
				}
			}
			if overlap {
				res = append(res, scored{p: p, score: dot})
			}
		}
	default:
		return nil, status.Errorf(codes.Unimplemented, "qdranttest: nearest by %T is not implemented", v)
	}
	slices.SortStableFunc(res, func(a, b scored) int { return cmp.Compare(b.score, a.score) })
	return res, nil
}

// applyIDF multiplies each query weight by Qdrant's IDF of its term over the whole collection:
// ln(1 + (N − df + 0.5)/(df + 0.5)), N the points having the sparse vector, df those having the
// term, deleted points not yet vacuumed included (see collection.deleted).
func (c *collection) applyIDF(name string, weight map[uint32]float64) {
	df := make(map[uint32]int, len(weight))
	n := 0
	count := func(p *point) {
		sv, ok := p.sparse[name]
		if !ok {
			return
		}
		n++
		for i, idx := range sv.indices {
			if _, ok := weight[idx]; ok && sv.values[i] != 0 {
				df[idx]++
			}
		}
	}
	for _, p := range c.points {
		count(p)
	}
	for _, p := range c.deleted {
		count(p)
	}
	for idx, w := range weight {
		d := float64(df[idx])
		weight[idx] = w * math.Log(1+(float64(n)-d+0.5)/(d+0.5))
	}
}

// ---------------------------------------------------------------------------------------------
// Filters.

func andFilters(a, b *qc.Filter) *qc.Filter {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return &qc.Filter{Must: []*qc.Condition{qc.NewFilterAsCondition(a), qc.NewFilterAsCondition(b)}}
}

func evalFilter(f *qc.Filter, p *point) (bool, error) {
	if f == nil {
		return true, nil
	}
	if f.MinShould != nil {
		return false, status.Error(codes.Unimplemented, "qdranttest: min_should is not implemented")
	}
	for _, c := range f.GetMust() {
		ok, err := evalCondition(c, p)
		if err != nil || !ok {
			return false, err
		}
	}
	for _, c := range f.GetMustNot() {
		ok, err := evalCondition(c, p)
		if err != nil || ok {
			return false, err
		}
	}
	if len(f.GetShould()) == 0 {
		return true, nil
	}
	for _, c := range f.GetShould() {
		ok, err := evalCondition(c, p)
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

func evalCondition(c *qc.Condition, p *point) (bool, error) {
	switch v := c.GetConditionOneOf().(type) {
	case *qc.Condition_Filter:
		return evalFilter(v.Filter, p)
	case *qc.Condition_HasId:
		for _, id := range v.HasId.GetHasId() {
			k, err := keyOf(id)
			if err != nil {
				return false, err
			}
			if k == p.key {
				return true, nil
			}
		}
		return false, nil
	case *qc.Condition_Field:
		return evalField(v.Field, p)
	default:
		return false, status.Errorf(codes.Unimplemented, "qdranttest: condition %T is not implemented", v)
	}
}

func evalField(fc *qc.FieldCondition, p *point) (bool, error) {
	if fc.GetMatch() == nil || fc.Range != nil || fc.IsEmpty != nil || fc.IsNull != nil ||
		fc.GeoBoundingBox != nil || fc.GeoRadius != nil || fc.GeoPolygon != nil || fc.ValuesCount != nil || fc.DatetimeRange != nil {
		return false, status.Errorf(codes.Unimplemented, "qdranttest: field condition on %q: only match is implemented", fc.GetKey())
	}
	if strings.ContainsAny(fc.GetKey(), ".[") {
		return false, status.Errorf(codes.Unimplemented, "qdranttest: nested payload keys (%q) are not implemented", fc.GetKey())
	}
	// A keyword condition matches a string value, or any element of a list of strings.
	var vals []string
	switch v := p.payload[fc.GetKey()].GetKind().(type) {
	case *qc.Value_StringValue:
		vals = []string{v.StringValue}
	case *qc.Value_ListValue:
		for _, e := range v.ListValue.GetValues() {
			if s, ok := e.GetKind().(*qc.Value_StringValue); ok {
				vals = append(vals, s.StringValue)
			}
		}
	}
	anyOf := func(want []string) bool {
		for _, v := range vals {
			if slices.Contains(want, v) {
				return true
			}
		}
		return false
	}
	switch m := fc.GetMatch().GetMatchValue().(type) {
	case *qc.Match_Keyword:
		return anyOf([]string{m.Keyword}), nil
	case *qc.Match_Keywords:
		return anyOf(m.Keywords.GetStrings()), nil
	case *qc.Match_ExceptKeywords:
		// Qdrant: a point without the key matches "except".
		return !anyOf(m.ExceptKeywords.GetStrings()), nil
	default:
		return false, status.Errorf(codes.Unimplemented, "qdranttest: match %T on %q is not implemented", m, fc.GetKey())
	}
}
