package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/toolmesh/toolmesh/services/retriever/embed"
	"github.com/toolmesh/toolmesh/services/retriever/index"
	"github.com/toolmesh/toolmesh/services/retriever/lexical"
)

// The methods that search with a dense embedder (-embed-url) too. hybrid is the index the
// retriever builds when an http embedder is configured (retriever.New: lexical.Default and
// index.New, i.e. the default options); dense ranks by the dense side alone.
func init() {
	methods = append(methods,
		method{name: "hybrid", doc: "what the retriever builds with an http embedder: default + the -embed-url model's cosine ranking, fused by the store's reciprocal rank fusion (k 60)",
			cfg: with(func(*lexical.Config) {}), opt: index.DefaultOptions(), dense: true},
		method{name: "dense", doc: "the -embed-url model's cosine ranking alone (the lexical encoder has every field weight 0, so it indexes no term; whole request only)",
			cfg: with(func(c *lexical.Config) {
				c.Weights = [len(c.Weights)]float64{}
				c.CharN, c.PairWeight = 0, 0
			}), opt: noSplit(), dense: true},
	)
}

// denseEmbedder is the embedder of the methods with dense set; nil until openDense.
var denseEmbedder *cachedDense

// openDense creates the embedder when a chosen method needs one. cachePath "" is the default
// file under the temporary directory; "none" disables the cache.
func openDense(chosen []method, url, model, cachePath string) error {
	var need []string
	for _, m := range chosen {
		if m.dense {
			need = append(need, m.name)
		}
	}
	if len(need) == 0 {
		return nil
	}
	if url == "" {
		return fmt.Errorf("method %s needs a dense embedder: pass -embed-url (see bench/embedserver)", strings.Join(need, ", "))
	}
	h, err := embed.NewHTTP(embed.HTTPConfig{URL: url, Model: model}, nil, nil)
	if err != nil {
		return err
	}
	switch cachePath {
	case "none":
		cachePath = ""
	case "":
		cachePath = filepath.Join(os.TempDir(), "toolmesh-embedcache-"+fileSafe(model)+".bin")
	}
	c, err := newCachedDense(h, cachePath)
	if err != nil {
		_ = h.Close()
		return err
	}
	denseEmbedder = c
	return nil
}

// denseOf is the dense embedder method m builds its index with (nil for lexical methods).
func denseOf(m method) embed.Dense {
	if !m.dense || denseEmbedder == nil {
		return nil
	}
	return denseEmbedder
}

// reportDense prints how much embedding the last method needed, and resets the counters.
func reportDense(w io.Writer, m method) {
	if !m.dense || denseEmbedder == nil {
		return
	}
	s := denseEmbedder.takeStats()
	fmt.Fprintf(w, "(embedding: %d texts from the server in %s (%d calls), %d from the cache %s)\n",
		s.sent, s.took.Round(time.Millisecond), s.calls, s.hits, denseEmbedder.path)
}

func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return '_'
	}, s)
}

// cachedDense keeps the vectors an embedder returned in a file keyed by a hash of the model
// name and the text, so that a second run (or a second method) embeds nothing again: the tools
// and queries take tens of seconds to embed on this machine, and the vectors of a model do not
// change. The key carries the model name only, as the retriever's index names do: point
// -embed-model (or -embed-cache) elsewhere when the server's model changes.
type cachedDense struct {
	inner *embed.HTTP
	path  string

	mu    sync.Mutex
	vecs  map[[16]byte][]float32
	dim   int
	out   *os.File
	stats denseStats
}

type denseStats struct {
	sent, hits, calls int
	took              time.Duration
}

var _ embed.Dense = (*cachedDense)(nil)

// newCachedDense loads path (if any) and opens it for appending. path "" keeps nothing.
func newCachedDense(inner *embed.HTTP, path string) (*cachedDense, error) {
	c := &cachedDense{inner: inner, path: path, vecs: map[[16]byte][]float32{}}
	if path == "" {
		return c, nil
	}
	good, err := c.load()
	if err != nil {
		return nil, fmt.Errorf("embedding cache %s: %w (delete it or pass -embed-cache none)", path, err)
	}
	// Cut a torn last record off, or the records appended after it would be misread.
	if fi, err := os.Stat(path); err == nil && fi.Size() > good {
		if err := os.Truncate(path, good); err != nil {
			return nil, fmt.Errorf("embedding cache: %w", err)
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("embedding cache: %w", err)
	}
	c.out = f
	return c, nil
}

// A cache record is the 16-byte key, the dimension as a little-endian uint32, then the vector
// as little-endian float32s. A torn last record (an interrupted run) is ignored; load returns
// the length of the whole records.
func (c *cachedDense) load() (int64, error) {
	f, err := os.Open(c.path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	var good int64
	for {
		var head [20]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return good, nil // EOF, or a torn record
		}
		n := int(binary.LittleEndian.Uint32(head[16:]))
		if n <= 0 || n > 1<<16 || (c.dim != 0 && n != c.dim) {
			return 0, fmt.Errorf("record of dimension %d after %d vectors of dimension %d", n, len(c.vecs), c.dim)
		}
		buf := make([]byte, 4*n)
		if _, err := io.ReadFull(r, buf); err != nil {
			return good, nil
		}
		good += int64(len(head) + len(buf))
		v := make([]float32, n)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
		}
		c.vecs[[16]byte(head[:16])] = v
		c.dim = n
	}
}

func (c *cachedDense) key(text string) [16]byte {
	h := sha256.Sum256([]byte(c.inner.Model() + "\x00" + text))
	return [16]byte(h[:16])
}

// Embed answers from the cache where it can and asks the server for the rest, in one call.
func (c *cachedDense) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([][]float32, len(texts))
	var missIdx []int
	var miss []string
	for i, t := range texts {
		if v, ok := c.vecs[c.key(t)]; ok {
			out[i] = v
			c.stats.hits++
			continue
		}
		missIdx = append(missIdx, i)
		miss = append(miss, t)
	}
	if len(miss) == 0 {
		return out, nil
	}
	start := time.Now()
	vecs, err := c.inner.Embed(ctx, miss)
	c.stats.took += time.Since(start)
	c.stats.calls++
	if err != nil {
		return nil, err
	}
	c.stats.sent += len(miss)
	var rec []byte
	for j, v := range vecs {
		out[missIdx[j]] = v
		k := c.key(miss[j])
		c.vecs[k] = v
		c.dim = len(v)
		rec = binary.LittleEndian.AppendUint32(append(rec, k[:]...), uint32(len(v)))
		for _, x := range v {
			rec = binary.LittleEndian.AppendUint32(rec, math.Float32bits(x))
		}
	}
	if c.out != nil {
		if _, err := c.out.Write(rec); err != nil {
			return nil, fmt.Errorf("embedding cache %s: %w", c.path, err)
		}
	}
	return out, nil
}

func (c *cachedDense) Model() string { return c.inner.Model() }

// Dim is the server's dimension, or the cache's when every vector so far came from it.
func (c *cachedDense) Dim() int {
	if d := c.inner.Dim(); d != 0 {
		return d
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dim
}

func (c *cachedDense) takeStats() denseStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	c.stats = denseStats{}
	return s
}

// Close closes the cache file and the embedder's idle connections.
func (c *cachedDense) Close() error {
	err := c.inner.Close()
	if c.out != nil {
		if cerr := c.out.Close(); err == nil {
			err = cerr
		}
	}
	return err
}
