package audit

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/internal/redact"
)

// format names the trail's format in each start record.
const format = "toolmesh-audit/1"

// hashSuffix is how every record ends: `,"hash":"<64 hex digits>"}`. A record's hash is taken
// over the record as it would be without it: the line up to the suffix, closed by "}".
const (
	hashOpen   = `,"hash":"`
	hashLen    = 64
	suffixLen  = len(hashOpen) + hashLen + len(`"}`)
	timeFormat = "2006-01-02T15:04:05.000000000Z07:00"
)

// newHasher is SHA-256, or HMAC-SHA256 under key.
func newHasher(key []byte) hash.Hash {
	if key == nil {
		return sha256.New()
	}
	return hmac.New(sha256.New, key)
}

// sum is h over b, in hex.
func sum(h hash.Hash, b []byte) string {
	h.Reset()
	h.Write(b)
	var s [sha256.Size]byte
	return hex.EncodeToString(h.Sum(s[:0]))
}

// seal ends the record that buf[at:] holds (closed by "}") with its hash, and a newline.
func seal(buf []byte, at int, h hash.Hash) ([]byte, string) {
	sum := sum(h, buf[at:])
	buf = buf[:len(buf)-1]
	buf = append(buf, hashOpen...)
	buf = append(buf, sum...)
	return append(buf, '"', '}', '\n'), sum
}

// sealed is body (a record closed by "}") with its hash: a line without its newline.
func sealed(body []byte, h hash.Hash) []byte {
	line, _ := seal(slices.Clone(body), 0, h)
	return line[:len(line)-1]
}

// bodyOf is what a line's hash covers, and the hash it carries; ok is false when the line does
// not end as a record does.
func bodyOf(line []byte) (body []byte, ok bool) {
	n := len(line)
	if n < suffixLen+2 || string(line[n-suffixLen:n-suffixLen+len(hashOpen)]) != hashOpen || string(line[n-2:]) != `"}` {
		return nil, false
	}
	if _, err := hex.DecodeString(string(line[n-2-hashLen : n-2])); err != nil {
		return nil, false
	}
	return append(line[:n-suffixLen:n-suffixLen], '}'), true
}

// appendStart appends a file's start record: what the trail is, why the file begins and the
// hash of the record before it (the previous file's last), so files verify alone and together.
func (w *writer) appendStart(buf []byte, seq uint64, prev string) ([]byte, string) {
	at := len(buf)
	buf = appendHead(buf, seq, time.Now(), "start")
	buf = appendField(buf, "format", format)
	buf = appendField(buf, "mac", w.macName)
	buf = appendField(buf, "arguments", w.cfg.Arguments)
	buf = appendField(buf, "reason", w.reason)
	buf = appendField(buf, "previous_file", w.previousFile)
	buf = appendField(buf, "host", w.host)
	buf = append(buf, `,"pid":`...)
	buf = strconv.AppendInt(buf, int64(os.Getpid()), 10)
	buf = appendField(buf, "prev", prev)
	buf = append(buf, '}')
	return seal(buf, at, w.mac)
}

// appendRecord appends the record of it, chained to prev; lost is the number of records
// dropped before it.
func (w *writer) appendRecord(buf []byte, it item, seq uint64, prev string, lost int64) ([]byte, string) {
	r := &it.rec
	at := len(buf)
	typ := typeOf(*r)
	buf = appendHead(buf, seq, r.Time, typ)
	buf = appendField(buf, "token", cut(r.Token, 128))
	buf = appendField(buf, "client", cut(r.Client, 256))
	if r.ForwardedFor != "" {
		buf = appendField(buf, "forwarded_for", cut(r.ForwardedFor, 256))
	}
	if typ == "call" {
		buf = appendField(buf, "via", cut(r.Via, 16))
		buf = appendField(buf, "origin", cut(r.Origin, 16))
	}
	buf = appendField(buf, "tool", cut(r.Tool, 512))
	if typ == "call" {
		buf = appendField(buf, "decision", cut(r.Decision, 16))
		if r.Rule != "" {
			buf = appendField(buf, "rule", cut(r.Rule, 64))
		}
		buf = w.appendArguments(buf, r)
		buf = append(buf, `,"result_bytes":`...)
		buf = strconv.AppendInt(buf, int64(r.ResultBytes), 10)
		buf = append(buf, `,"is_error":`...)
		buf = strconv.AppendBool(buf, r.IsError)
		if r.Status != "" {
			buf = appendField(buf, "status", cut(r.Status, 32))
		}
		buf = append(buf, `,"duration_ms":`...)
		buf = strconv.AppendFloat(buf, float64(r.Duration.Microseconds())/1000, 'f', -1, 64)
	} else if r.Detail != "" {
		buf = appendField(buf, "detail", cut(r.Detail, 2048))
	}
	if it.sc.HasTraceID() {
		buf = appendField(buf, "trace_id", it.sc.TraceID().String())
	}
	if lost > 0 {
		buf = append(buf, `,"dropped":`...)
		buf = strconv.AppendInt(buf, lost, 10)
	}
	buf = appendField(buf, "prev", prev)
	buf = append(buf, '}')
	return seal(buf, at, w.mac)
}

// appendArguments appends the arguments' digest and size, and with arguments full the
// arguments themselves, masked.
func (w *writer) appendArguments(buf []byte, r *Record) []byte {
	args := r.Arguments
	if args == nil && r.ArgumentsJSON != nil {
		// A text that is not an object (the executor refuses the call) reads as none.
		args = &structpb.Struct{}
		if protojson.Unmarshal(r.ArgumentsJSON, args) != nil {
			args = nil
		}
	}
	// The canonical arguments go at the end of buf for a moment, to be hashed in place.
	at := len(buf)
	buf = appendArgs(buf, args, false)
	n := len(buf) - at
	digest := sum(w.argsMac, buf[at:])
	buf = buf[:at]
	buf = appendField(buf, "args_digest", w.macName+":"+digest)
	buf = append(buf, `,"args_bytes":`...)
	buf = strconv.AppendInt(buf, int64(n), 10)
	if w.cfg.Arguments != ArgumentsFull {
		return buf
	}
	at = len(buf)
	buf = append(buf, `,"arguments":`...)
	buf = appendArgs(buf, args, true)
	if len(buf)-at > maxArgumentBytes {
		buf = append(buf[:at], `,"arguments_omitted":true`...)
	}
	return buf
}

// appendHead begins a record: its number in the file, its time and its type.
func appendHead(buf []byte, seq uint64, t time.Time, typ string) []byte {
	buf = append(buf, `{"seq":`...)
	buf = strconv.AppendUint(buf, seq, 10)
	buf = append(buf, `,"time":"`...)
	buf = t.UTC().AppendFormat(buf, timeFormat)
	buf = append(buf, '"')
	return appendField(buf, "type", typ)
}

// appendField appends ,"name":"value".
func appendField(buf []byte, name, value string) []byte {
	buf = append(buf, ',', '"')
	buf = append(buf, name...)
	buf = append(buf, '"', ':')
	return appendString(buf, value)
}

// cut bounds s to n bytes, so that no caller's string makes a record of any size.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// appendArgs appends s as encoding/json writes the same value (keys sorted, no spaces, no
// HTML escaping): the canonical form the digest is taken over, which anyone can make again
// from the arguments' JSON. With masked, what looks like a secret is replaced (masked).
func appendArgs(buf []byte, s *structpb.Struct, masked bool) []byte {
	if s == nil {
		return append(buf, '{', '}')
	}
	return appendStruct(buf, s, masked)
}

func appendStruct(buf []byte, s *structpb.Struct, masked bool) []byte {
	keys := make([]string, 0, len(s.GetFields()))
	for k := range s.GetFields() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	buf = append(buf, '{')
	for i, k := range keys {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendString(buf, k)
		buf = append(buf, ':')
		if masked && secretKey(k) {
			buf = appendString(buf, redact.Mask)
			continue
		}
		buf = appendValue(buf, s.GetFields()[k], masked)
	}
	return append(buf, '}')
}

func appendValue(buf []byte, v *structpb.Value, masked bool) []byte {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		return appendFloat(buf, k.NumberValue)
	case *structpb.Value_StringValue:
		s := k.StringValue
		if masked {
			s = maskValue(s)
		}
		return appendString(buf, s)
	case *structpb.Value_BoolValue:
		return strconv.AppendBool(buf, k.BoolValue)
	case *structpb.Value_StructValue:
		return appendStruct(buf, k.StructValue, masked)
	case *structpb.Value_ListValue:
		buf = append(buf, '[')
		for i, e := range k.ListValue.GetValues() {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = appendValue(buf, e, masked)
		}
		return append(buf, ']')
	}
	return append(buf, "null"...)
}

// appendFloat writes f as encoding/json does (NaN and infinities, which JSON cannot hold and
// structpb's JSON never holds, as null).
func appendFloat(buf []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(buf, "null"...)
	}
	abs, fmt := math.Abs(f), byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		fmt = 'e'
	}
	buf = strconv.AppendFloat(buf, f, fmt, -1, 64)
	if fmt == 'e' {
		// e-09 to e-9
		if n := len(buf); n >= 4 && buf[n-4] == 'e' && buf[n-3] == '-' && buf[n-2] == '0' {
			buf[n-2] = buf[n-1]
			buf = buf[:n-1]
		}
	}
	return buf
}

// appendString writes s as a JSON string as encoding/json does without HTML escaping:
// invalid UTF-8 becomes U+FFFD, and U+2028 and U+2029 are escaped.
func appendString(buf []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			buf = append(buf, s[start:i]...)
			switch c {
			case '"', '\\':
				buf = append(buf, '\\', c)
			case '\b':
				buf = append(buf, '\\', 'b')
			case '\f':
				buf = append(buf, '\\', 'f')
			case '\n':
				buf = append(buf, '\\', 'n')
			case '\r':
				buf = append(buf, '\\', 'r')
			case '\t':
				buf = append(buf, '\\', 't')
			default:
				buf = append(buf, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			buf = append(buf, s[start:i]...)
			buf = append(buf, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			buf = append(buf, s[start:i]...)
			buf = append(buf, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}

// Keys whose values are masked with arguments full: a key that is one of secretNames, or
// holds one of secretParts, once lower-cased and stripped of everything but letters and digits
// ("X-Api-Token" is "xapitoken"). Masking a value that was no secret costs a line of the
// trail's detail (its digest stays); missing one puts a secret in a file kept for years.
var (
	secretNames = []string{"auth", "key", "pin", "otp", "jwt", "bearer", "session", "sessionid", "cookie", "pwd", "pass", "passcode"}
	secretParts = []string{"password", "passwd", "passphrase", "secret", "token", "apikey", "accesskey", "privatekey", "credential", "authorization", "signature", "cookie"}
	// secretPrefixes begin values that are the keys of well-known services whatever their
	// key (written as the services write them).
	secretPrefixes = []string{"sk-", "sk_live_", "rk_live_", "ghp_", "gho_", "ghs_", "ghu_", "github_pat_", "glpat-", "xoxb-", "xoxp-", "AKIA", "AIza"}
)

func secretKey(k string) bool {
	var b [64]byte
	n := 0
	for i := 0; i < len(k) && n < len(b); i++ {
		c := k[i]
		switch {
		case 'A' <= c && c <= 'Z':
			b[n] = c + 'a' - 'A'
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
			b[n] = c
		default:
			continue
		}
		n++
	}
	norm := string(b[:n])
	if slices.Contains(secretNames, norm) {
		return true
	}
	for _, p := range secretParts {
		if strings.Contains(norm, p) {
			return true
		}
	}
	return false
}

// maskValue is s as a record with arguments full may hold it: a credential replaced whole,
// the credentials of any URL in it masked (redact.Text).
func maskValue(s string) string {
	if credential(s) {
		return redact.Mask
	}
	return redact.Text(s)
}

// credential says whether s looks like a credential: bearer or basic credentials, a JWT, a
// well-known service's key.
func credential(s string) bool {
	for _, p := range []string{"bearer ", "basic "} {
		if len(s) > len(p)+8 && strings.EqualFold(s[:len(p)], p) {
			return true
		}
	}
	if strings.HasPrefix(s, "eyJ") && strings.Count(s, ".") == 2 {
		return true
	}
	for _, p := range secretPrefixes {
		if strings.HasPrefix(s, p) && len(s) >= len(p)+12 && !strings.ContainsAny(s, " \t\n") {
			return true
		}
	}
	return false
}

// lastHash is the hash of the last whole record of file, or "" when it has none: the head a
// new file's chain continues from after a restart.
func lastHash(file string) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	const tail = 256 << 10 // records are at most about 20 KiB
	off := max(0, st.Size()-tail)
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil {
		return ""
	}
	end := bytes.LastIndexByte(buf, '\n')
	if end < 0 {
		return ""
	}
	line := buf[bytes.LastIndexByte(buf[:end], '\n')+1 : end]
	if _, ok := bodyOf(line); !ok {
		return ""
	}
	return string(line[len(line)-2-hashLen : len(line)-2])
}

// Digest is the digest a record holds of args: "sha256:" and the SHA-256 of their canonical
// JSON, or "hmac-sha256:" and its HMAC under key when the trail is keyed. A record's
// args_digest equals Digest of the arguments it was made with, however their JSON was spaced.
func Digest(args *structpb.Struct, key []byte) string {
	name := "sha256"
	if key != nil {
		name = "hmac-sha256"
	}
	return name + ":" + sum(newHasher(key), appendArgs(nil, args, false))
}
