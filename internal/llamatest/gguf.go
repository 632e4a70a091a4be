package llamatest

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
)

// GGUF value types (ggml/include/gguf.h enum gguf_type).
const (
	ggufUint32  = 4
	ggufInt32   = 5
	ggufFloat32 = 6
	ggufBool    = 7
	ggufString  = 8
	ggufArray   = 9
)

// ggmlTypeF32 is GGML_TYPE_F32.
const ggmlTypeF32 = 0

// ggufAlignment is GGUF_DEFAULT_ALIGNMENT: the data section and every tensor in it start at a
// multiple of it.
const ggufAlignment = 32

// Token types of tokenizer.ggml.token_type (llama_token_type in llama-vocab.h).
const (
	tokenNormal  = 1
	tokenUnknown = 2
	tokenControl = 3
	tokenByte    = 6
)

// Ids of the special tokens of the tiny model's vocabulary.
const (
	TokenUnknown = 0
	TokenBOS     = 1
	TokenEOS     = 2
)

// TinyModel describes a random-weight llama-architecture model small enough to write in a
// test (about 0.5 MB with the defaults). Its text is noise, but llama-server loads it in
// milliseconds and serves it with everything around the model real: /health, /props,
// /tokenize, streaming, error bodies and grammar-constrained decoding. Zero fields take the
// defaults noted on each.
type TinyModel struct {
	ContextLength int    // llama.context_length (default 4096, Gorilla OpenFunctions v2's)
	Embedding     int    // llama.embedding_length (default 64)
	Blocks        int    // llama.block_count (default 2)
	Heads         int    // llama.attention.head_count and head_count_kv (default 4)
	FeedForward   int    // llama.feed_forward_length (default 128)
	Seed          uint64 // seed of the random weights (default 1)
	Name          string // general.name (default "toolmesh-tiny-random")
}

func (m TinyModel) withDefaults() TinyModel {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&m.ContextLength, 4096)
	def(&m.Embedding, 64)
	def(&m.Blocks, 2)
	def(&m.Heads, 4)
	def(&m.FeedForward, 128)
	if m.Seed == 0 {
		m.Seed = 1
	}
	if m.Name == "" {
		m.Name = "toolmesh-tiny-random"
	}
	return m
}

// TinyVocab returns the tiny model's vocabulary: <unk>, <s>, </s>, the 256 byte tokens
// <0x00>…<0xFF>, "▁" (SentencePiece's space) and the printable ASCII characters. Any text
// tokenizes: characters outside it fall back to their UTF-8 bytes.
func TinyVocab() (tokens []string, types []int32) {
	tokens = []string{"<unk>", "<s>", "</s>"}
	types = []int32{tokenUnknown, tokenControl, tokenControl}
	for b := range 256 {
		tokens = append(tokens, fmt.Sprintf("<0x%02X>", b))
		types = append(types, tokenByte)
	}
	tokens = append(tokens, "▁")
	types = append(types, tokenNormal)
	for c := '!'; c <= '~'; c++ {
		tokens = append(tokens, string(c))
		types = append(types, tokenNormal)
	}
	return tokens, types
}

// ByteToken is the id of the byte token <0xXX> in TinyVocab.
func ByteToken(b byte) int { return 3 + int(b) }

// TinyModelBytes is the GGUF file of m, for tests that serve it (e.g. from a hub double).
func TinyModelBytes(t testing.TB, m TinyModel) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteTinyModel(&b, m); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// WriteTinyModelFile writes m as a GGUF file at path.
func WriteTinyModelFile(path string, m TinyModel) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WriteTinyModel(f, m); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WriteTinyModel writes m as GGUF version 3 (ggml/docs/gguf.md): all tensors F32, small
// random values, norm weights 1.
func WriteTinyModel(w io.Writer, m TinyModel) error {
	m = m.withDefaults()
	if m.Embedding%m.Heads != 0 {
		return fmt.Errorf("llamatest: embedding %d is not a multiple of heads %d", m.Embedding, m.Heads)
	}
	tokens, types := TinyVocab()
	scores := make([]float32, len(tokens))
	for i := range scores {
		scores[i] = -float32(i) // no merges exist, so scores only order ties
	}
	nVocab, nEmbd, nFF := len(tokens), m.Embedding, m.FeedForward

	kvs := []ggufKV{
		{"general.architecture", "llama"},
		{"general.name", m.Name},
		{"general.alignment", uint32(ggufAlignment)},
		{"llama.context_length", uint32(m.ContextLength)},
		{"llama.embedding_length", uint32(nEmbd)},
		{"llama.block_count", uint32(m.Blocks)},
		{"llama.feed_forward_length", uint32(nFF)},
		{"llama.attention.head_count", uint32(m.Heads)},
		{"llama.attention.head_count_kv", uint32(m.Heads)},
		{"llama.attention.layer_norm_rms_epsilon", float32(1e-5)},
		{"llama.rope.dimension_count", uint32(nEmbd / m.Heads)},
		{"llama.rope.freq_base", float32(10000)},
		{"llama.vocab_size", uint32(nVocab)},
		{"tokenizer.ggml.model", "llama"},
		{"tokenizer.ggml.tokens", tokens},
		{"tokenizer.ggml.scores", scores},
		{"tokenizer.ggml.token_type", types},
		{"tokenizer.ggml.bos_token_id", uint32(TokenBOS)},
		{"tokenizer.ggml.eos_token_id", uint32(TokenEOS)},
		{"tokenizer.ggml.unknown_token_id", uint32(TokenUnknown)},
		{"tokenizer.ggml.add_bos_token", true},
		{"tokenizer.ggml.add_eos_token", false},
	}

	type tensor struct {
		name string
		dims []int // innermost first, as ggml's ne
		norm bool  // all ones instead of random
	}
	tensors := []tensor{
		{"token_embd.weight", []int{nEmbd, nVocab}, false},
		{"output_norm.weight", []int{nEmbd}, true},
		{"output.weight", []int{nEmbd, nVocab}, false},
	}
	for b := range m.Blocks {
		p := fmt.Sprintf("blk.%d.", b)
		tensors = append(tensors,
			tensor{p + "attn_norm.weight", []int{nEmbd}, true},
			tensor{p + "attn_q.weight", []int{nEmbd, nEmbd}, false},
			tensor{p + "attn_k.weight", []int{nEmbd, nEmbd}, false},
			tensor{p + "attn_v.weight", []int{nEmbd, nEmbd}, false},
			tensor{p + "attn_output.weight", []int{nEmbd, nEmbd}, false},
			tensor{p + "ffn_norm.weight", []int{nEmbd}, true},
			tensor{p + "ffn_gate.weight", []int{nEmbd, nFF}, false},
			tensor{p + "ffn_down.weight", []int{nFF, nEmbd}, false},
			tensor{p + "ffn_up.weight", []int{nEmbd, nFF}, false},
		)
	}

	gw := &ggufWriter{w: bufio.NewWriter(w)}
	gw.raw([]byte("GGUF"))
	gw.u32(3)
	gw.u64(uint64(len(tensors)))
	gw.u64(uint64(len(kvs)))
	for _, kv := range kvs {
		gw.str(kv.key)
		gw.value(kv.value)
	}
	var offset uint64
	sizes := make([]uint64, len(tensors))
	for i, t := range tensors {
		gw.str(t.name)
		gw.u32(uint32(len(t.dims)))
		n := uint64(1)
		for _, d := range t.dims {
			gw.u64(uint64(d))
			n *= uint64(d)
		}
		gw.u32(ggmlTypeF32)
		gw.u64(offset)
		sizes[i] = n * 4
		offset += align(sizes[i])
	}
	gw.pad()
	rng := rand.New(rand.NewPCG(m.Seed, 0x746f6f6c6d657368))
	for i, t := range tensors {
		n := sizes[i] / 4
		for range n {
			v := float32(1)
			if !t.norm {
				v = float32(rng.NormFloat64() * 0.2)
			}
			gw.u32(math.Float32bits(v))
		}
		gw.pad()
	}
	if gw.err != nil {
		return gw.err
	}
	return gw.w.Flush()
}

type ggufKV struct {
	key   string
	value any
}

func align(n uint64) uint64 { return (n + ggufAlignment - 1) / ggufAlignment * ggufAlignment }

// ggufWriter writes little-endian GGUF primitives and remembers the first error.
type ggufWriter struct {
	w   *bufio.Writer
	n   uint64
	err error
	buf [8]byte
}

func (g *ggufWriter) raw(b []byte) {
	if g.err != nil {
		return
	}
	_, g.err = g.w.Write(b)
	g.n += uint64(len(b))
}

func (g *ggufWriter) u32(v uint32) {
	binary.LittleEndian.PutUint32(g.buf[:4], v)
	g.raw(g.buf[:4])
}

func (g *ggufWriter) u64(v uint64) {
	binary.LittleEndian.PutUint64(g.buf[:8], v)
	g.raw(g.buf[:8])
}

func (g *ggufWriter) str(s string) {
	g.u64(uint64(len(s)))
	g.raw([]byte(s))
}

func (g *ggufWriter) pad() {
	for g.n%ggufAlignment != 0 {
		g.raw([]byte{0})
	}
}

func (g *ggufWriter) value(v any) {
	switch v := v.(type) {
	case uint32:
		g.u32(ggufUint32)
		g.u32(v)
	case float32:
		g.u32(ggufFloat32)
		g.u32(math.Float32bits(v))
	case bool:
		g.u32(ggufBool)
		if v {
			g.raw([]byte{1})
		} else {
			g.raw([]byte{0})
		}
	case string:
		g.u32(ggufString)
		g.str(v)
	case []string:
		g.u32(ggufArray)
		g.u32(ggufString)
		g.u64(uint64(len(v)))
		for _, s := range v {
			g.str(s)
		}
	case []float32:
		g.u32(ggufArray)
		g.u32(ggufFloat32)
		g.u64(uint64(len(v)))
		for _, f := range v {
			g.u32(math.Float32bits(f))
		}
	case []int32:
		g.u32(ggufArray)
		g.u32(ggufInt32)
		g.u64(uint64(len(v)))
		for _, i := range v {
			g.u32(uint32(i))
		}
	default:
		if g.err == nil {
			g.err = fmt.Errorf("llamatest: gguf value of type %T", v)
		}
	}
}

// CallBias is llama-server arguments that make the tiny model's noise start with "<" far more
// often: left alone it hardly ever writes "<<" (one character of about 200 allowed first), so
// under a grammar it would only ever answer in text and never call a tool.
func CallBias() []string {
	args := []string{"--logit-bias", strconv.Itoa(ByteToken('<')) + "+6"}
	tokens, _ := TinyVocab()
	for id, tok := range tokens {
		if tok == "<" {
			args = append(args, "--logit-bias", strconv.Itoa(id)+"+6")
		}
	}
	return args
}
