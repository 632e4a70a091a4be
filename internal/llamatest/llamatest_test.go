package llamatest

import (
	"bytes"
	"encoding/binary"
	"io"
	"net/http"
	"strings"
	"testing"
)

// readGGUF reads a GGUF v3 header: the metadata keys and types, and the tensors' names,
// dims and offsets.
func readGGUF(t *testing.T, b []byte) (version uint32, kvs map[string]uint32, tensors map[string][]uint64, dataStart uint64) {
	t.Helper()
	r := bytes.NewReader(b)
	rd := func(v any) {
		if err := binary.Read(r, binary.LittleEndian, v); err != nil {
			t.Fatalf("reading: %v", err)
		}
	}
	str := func() string {
		var n uint64
		rd(&n)
		s := make([]byte, n)
		if _, err := io.ReadFull(r, s); err != nil {
			t.Fatal(err)
		}
		return string(s)
	}
	var skip func(typ uint32)
	skip = func(typ uint32) {
		switch typ {
		case ggufUint32, ggufInt32, ggufFloat32:
			var v uint32
			rd(&v)
		case ggufBool:
			var v uint8
			rd(&v)
		case ggufString:
			str()
		case ggufArray:
			var et uint32
			var n uint64
			rd(&et)
			rd(&n)
			for range n {
				skip(et)
			}
		default:
			t.Fatalf("unexpected type %d", typ)
		}
	}
	magic := make([]byte, 4)
	io.ReadFull(r, magic)
	if string(magic) != "GGUF" {
		t.Fatalf("magic %q", magic)
	}
	var nt, nkv uint64
	rd(&version)
	rd(&nt)
	rd(&nkv)
	kvs = map[string]uint32{}
	for range nkv {
		k := str()
		var typ uint32
		rd(&typ)
		kvs[k] = typ
		skip(typ)
	}
	tensors = map[string][]uint64{}
	for range nt {
		name := str()
		var nd uint32
		rd(&nd)
		dims := make([]uint64, nd)
		for i := range dims {
			rd(&dims[i])
		}
		var typ uint32
		var off uint64
		rd(&typ)
		rd(&off)
		if typ != ggmlTypeF32 || off%ggufAlignment != 0 {
			t.Errorf("tensor %s: type %d offset %d", name, typ, off)
		}
		tensors[name] = dims
	}
	pos := uint64(len(b) - r.Len())
	return version, kvs, tensors, align(pos)
}

func TestWriteTinyModel(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteTinyModel(&buf, TinyModel{}); err != nil {
		t.Fatal(err)
	}
	if n := buf.Len(); n < 400<<10 || n > 700<<10 {
		t.Errorf("size %d bytes, want about 0.5 MB", n)
	}
	version, kvs, tensors, dataStart := readGGUF(t, buf.Bytes())
	if version != 3 {
		t.Errorf("version %d", version)
	}
	for _, k := range []string{"general.architecture", "llama.context_length", "llama.embedding_length", "llama.block_count",
		"llama.feed_forward_length", "llama.attention.head_count", "llama.attention.head_count_kv",
		"llama.attention.layer_norm_rms_epsilon", "llama.rope.dimension_count", "tokenizer.ggml.model",
		"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
		"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id"} {
		if _, ok := kvs[k]; !ok {
			t.Errorf("metadata %s missing", k)
		}
	}
	tokens, _ := TinyVocab()
	if len(tensors) != 3+2*9 {
		t.Errorf("%d tensors, want 21", len(tensors))
	}
	if d := tensors["token_embd.weight"]; len(d) != 2 || d[0] != 64 || d[1] != uint64(len(tokens)) {
		t.Errorf("token_embd dims %v", d)
	}
	if d := tensors["blk.1.ffn_down.weight"]; len(d) != 2 || d[0] != 128 || d[1] != 64 {
		t.Errorf("ffn_down dims %v", d)
	}
	var total uint64
	for _, d := range tensors {
		n := uint64(4)
		for _, x := range d {
			n *= x
		}
		total += align(n)
	}
	if got := uint64(buf.Len()); got != dataStart+total {
		t.Errorf("file is %d bytes, header says %d", got, dataStart+total)
	}
	var again bytes.Buffer
	_ = WriteTinyModel(&again, TinyModel{})
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Error("the same seed wrote different files")
	}
}

func TestTokenizeAndPieces(t *testing.T) {
	tokens, types := TinyVocab()
	if len(tokens) != len(types) || tokens[ByteToken(0xC3)] != "<0xC3>" || tokens[tokenSpace] != "▁" || tokens[tokenSpace+1] != "!" {
		t.Fatalf("vocab layout changed")
	}
	for _, text := range []string{"Hello wörld 🙂", "a\tb\n", "<<function>>f(x='y')"} {
		var got []byte
		for _, id := range Tokenize(text, false, false)[1:] { // drop the leading space
			got = append(got, Piece(id)...)
		}
		if string(got) != text {
			t.Errorf("pieces of %q join to %q", text, got)
		}
	}
}

func TestDoubleRoutes(t *testing.T) {
	d := NewDouble(t, DoubleOptions{})
	hc := &http.Client{}
	defer hc.CloseIdleConnections()
	for _, tc := range []struct {
		method, path, body string
		status             int
		contains           string
	}{
		{"GET", "/health", "", 200, `"status":"ok"`},
		{"GET", "/nope", "", 404, `"File Not Found"`},
		{"POST", "/completion", "garbage", 400, "parse_error"},
		{"POST", "/completion", `{"prompt":"x","grammar":"root ::= \"yes"}`, 400, "failed to parse grammar"},
		{"POST", "/completion", `{"prompt":"x","grammar":"expr ::= \"yes\""}`, 400, "failed to parse grammar"},
		{"POST", "/completion", `{"prompt":"unscripted"}`, 500, "no reply scripted"},
		{"POST", "/tokenize", `{"content":5}`, 400, "type must be string"},
		{"POST", "/tokenize", `{"content":"é","with_pieces":true}`, 200, `{"id":198,"piece":[195]}`},
		{"GET", "/slots", "", 200, `"is_processing":false`},
	} {
		req, _ := http.NewRequest(tc.method, d.URL+tc.path, strings.NewReader(tc.body))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.contains) {
			t.Errorf("%s %s %s = %d %s; want %d containing %s", tc.method, tc.path, tc.body, resp.StatusCode, b, tc.status, tc.contains)
		}
	}
	for _, g := range []string{`root ::= "yes" | "no"`, "# c \"\nroot ::= [\"a-z]+ \"\\\"\"", `root ::= "yes" | `} {
		if !grammarLooksValid(g) {
			t.Errorf("grammarLooksValid(%q) = false", g)
		}
	}
}
