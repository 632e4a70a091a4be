// Package hubtest is a test double of a Hugging Face hub, faithful to the protocol that
// huggingface_hub's own client (file_download.py, hf_api.py) speaks:
//
//   - HEAD and GET ENDPOINT/OWNER/REPO/resolve/REVISION/FILE: for an LFS file a 302 to a
//     separate CDN server, with X-Repo-Commit, X-Linked-Etag (the quoted SHA-256),
//     X-Linked-Size and Content-Length; a small non-LFS file is answered directly with
//     its git blob id as ETag. REVISION is a commit id or a branch. 404s carry X-Error-Code
//     (RepoNotFound, RevisionNotFound, EntryNotFound); a gated repository answers 401 without
//     a token it accepts.
//   - GET ENDPOINT/api/models/OWNER/REPO/revision/REVISION?blobs=true: id, sha and siblings
//     with rfilename, size, blobId and lfs {sha256, size, pointerSize}.
//   - the CDN: GET /blobs/SHA256 with Range (206 and Content-Range). The redirect to it is
//     signed as the hub's are (X-Amz-Algorithm, X-Amz-Credential, X-Amz-Expires,
//     X-Amz-Signature in the query) and the CDN refuses a request without that signature
//     (403), so a client must follow the Location as given; Signature is the secret part,
//     for tests that check it never reaches a log, an error or a file.
//
// Failure modes are set per test: cut the connection mid-file, hang up before answering,
// serve wrong bytes, more bytes than stated, or a trickle, answer 5xx a number of times,
// claim another commit than the one asked for, leave X-Linked-Etag out (the model API then
// tells the SHA-256) or state no size at all. Every request is recorded with its host and
// whether it carried Authorization.
package hubtest

import (
	"bytes"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/modelfetch"
)

// Hub is a running hub double: URL is the endpoint (HF_ENDPOINT), CDNURL the separate server
// the bytes of LFS files come from. Signature is the X-Amz-Signature of every redirect to the
// CDN: a secret as far as logs and errors are concerned.
type Hub struct {
	URL, CDNURL string
	Signature   string

	hub, cdn *httptest.Server

	mu       sync.Mutex
	repos    map[string]*repo
	blobs    map[string][]byte // sha256 → bytes
	requests []Request
	// failure modes
	cutAfter   int64 // close the connection after this many body bytes...
	cuts       int   // ...this many more times
	corrupt    int   // serve altered bytes this many more times
	fail5xx    int   // answer 503 this many more times (hub and CDN)
	otherCommt string
	noLinked   bool          // leave X-Linked-Etag out
	noSize     bool          // state no size: no X-Linked-Size, Content-Length or API size
	overlong   int           // the CDN sends this many bytes more than the file has
	trickle    time.Duration // the CDN sends one byte per this interval
	hangups    int           // the CDN closes this many more connections without answering
}

type repo struct {
	gatedToken string            // "" = public
	branches   map[string]string // name → commit
	commits    map[string]map[string]file
}

type file struct {
	data []byte
	lfs  bool
}

// Request is one request the double received.
type Request struct {
	// Host is "hub" or "cdn".
	Host, Method, Path, Range string
	// Authorization is the header as sent ("" when absent).
	Authorization string
}

// New starts the hub and its CDN; both stop when the test ends.
func New(t testing.TB) *Hub {
	h := &Hub{repos: map[string]*repo{}, blobs: map[string][]byte{}, Signature: rand.Text()}
	h.hub = httptest.NewServer(http.HandlerFunc(h.serveHub))
	h.cdn = httptest.NewServer(http.HandlerFunc(h.serveCDN))
	h.URL, h.CDNURL = h.hub.URL, h.cdn.URL
	t.Cleanup(func() { h.hub.Close(); h.cdn.Close() })
	return h
}

// NewFromEnv is New, with HF_ENDPOINT naming the double and HF_TOKEN cleared for the rest of
// the test, so that code reading the environment (and the processes it starts) use it.
func NewFromEnv(t testing.TB) *Hub {
	h := New(t)
	t.Setenv(modelfetch.EnvEndpoint, h.URL)
	t.Setenv(modelfetch.EnvToken, "")
	return h
}

// File adds a file to repo ("OWNER/REPO") at commit (40 hex digits), stored in LFS (a
// redirect to the CDN) unless lfs is false. It returns the file's SHA-256.
func (h *Hub) File(repoID, commit, name string, data []byte, lfs bool) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.repo(repoID)
	if r.commits[commit] == nil {
		r.commits[commit] = map[string]file{}
	}
	r.commits[commit][name] = file{data: bytes.Clone(data), lfs: lfs}
	sum := sha256.Sum256(data)
	h.blobs[hex.EncodeToString(sum[:])] = bytes.Clone(data)
	return hex.EncodeToString(sum[:])
}

// Branch points a branch of repo at commit.
func (h *Hub) Branch(repoID, name, commit string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.repo(repoID).branches[name] = commit
}

// Gate makes repo answer 401 unless "Authorization: Bearer token" is sent.
func (h *Hub) Gate(repoID, token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.repo(repoID).gatedToken = token
}

func (h *Hub) repo(id string) *repo {
	r := h.repos[id]
	if r == nil {
		r = &repo{branches: map[string]string{}, commits: map[string]map[string]file{}}
		h.repos[id] = r
	}
	return r
}

// CutAfter makes the next times downloads from the CDN stop after n bytes of the body:
// the connection is closed mid-file.
func (h *Hub) CutAfter(n int64, times int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cutAfter, h.cuts = n, times
}

// Corrupt makes the next times downloads from the CDN serve other bytes of the same length.
func (h *Hub) Corrupt(times int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.corrupt = times
}

// Fail5xx makes the next times requests (to the hub or the CDN) answer 503.
func (h *Hub) Fail5xx(times int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fail5xx = times
}

// ClaimCommit makes the hub answer X-Repo-Commit: commit whatever was asked, as a
// misconfigured mirror might.
func (h *Hub) ClaimCommit(commit string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.otherCommt = commit
}

// OmitLinkedEtag leaves X-Linked-Etag out of the resolve answers, as a mirror that does not
// pass it on would: a client must then ask the model API for the file's lfs.sha256.
func (h *Hub) OmitLinkedEtag() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.noLinked = true
}

// OmitSize states no size anywhere: no X-Linked-Size, no Content-Length on the resolve
// answers (a body of unknown length), no size in the model API, as a mirror that streams
// what it proxies might.
func (h *Hub) OmitSize() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.noSize = true
}

// Overlong makes the CDN send extra bytes after the file's (and say so in its
// Content-Length), as a server serving another, larger file would.
func (h *Hub) Overlong(extra int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.overlong = extra
}

// Trickle makes the CDN send one byte every interval, each flushed at once: the connection is
// never idle for long, and the file takes forever.
func (h *Hub) Trickle(every time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.trickle = every
}

// Hangup makes the CDN close the next times connections without answering, so that the
// client's request fails with a transport error (Go's *url.Error, which quotes the URL).
func (h *Hub) Hangup(times int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hangups = times
}

// Requests returns what the double received so far.
func (h *Hub) Requests() []Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Request(nil), h.requests...)
}

func (h *Hub) record(host string, r *http.Request) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.requests = append(h.requests, Request{Host: host, Method: r.Method, Path: r.URL.Path,
		Range: r.Header.Get("Range"), Authorization: r.Header.Get("Authorization")})
	if h.fail5xx > 0 {
		h.fail5xx--
		return true
	}
	return false
}

func hubError(w http.ResponseWriter, status int, code, msg string) {
	if code != "" {
		w.Header().Set("X-Error-Code", code)
	}
	w.Header().Set("X-Error-Message", msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

func (h *Hub) serveHub(w http.ResponseWriter, r *http.Request) {
	if h.record("hub", r) {
		hubError(w, http.StatusServiceUnavailable, "", "Service Unavailable")
		return
	}
	if rest, ok := strings.CutPrefix(r.URL.Path, "/api/models/"); ok && r.Method == http.MethodGet {
		h.serveAPI(w, r, rest)
		return
	}
	// /OWNER/REPO/resolve/REVISION/FILE...
	parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 5)
	if len(parts) < 5 || parts[2] != "resolve" || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		hubError(w, http.StatusNotFound, "", "no such route")
		return
	}
	repoID, rev, name := parts[0]+"/"+parts[1], parts[3], parts[4]
	h.mu.Lock()
	commit, f, status, code := h.find(r, repoID, rev, name)
	claim, noLinked, noSize := h.otherCommt, h.noLinked, h.noSize
	h.mu.Unlock()
	if status != 0 {
		hubError(w, status, code, code)
		return
	}
	if claim != "" {
		commit = claim
	}
	w.Header().Set("X-Repo-Commit", commit)
	if !f.lfs {
		// A plain git file: served here, its ETag the git blob id (not a SHA-256).
		w.Header().Set("ETag", `"`+gitBlobID(f.data)+`"`)
		if noSize {
			// Flushed before the body: net/http then sends it chunked, with no length.
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
		} else {
			w.Header().Set("Content-Length", strconv.Itoa(len(f.data)))
		}
		if r.Method == http.MethodGet {
			_, _ = w.Write(f.data)
		}
		return
	}
	sum := sha256.Sum256(f.data)
	oid := hex.EncodeToString(sum[:])
	if !noLinked {
		w.Header().Set("X-Linked-Etag", `"`+oid+`"`)
	}
	if !noSize {
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(f.data)))
	}
	w.Header().Set("ETag", `"`+gitBlobID(pointer(oid, len(f.data)))+`"`)
	w.Header().Set("Location", h.CDNURL+"/blobs/"+oid+"?"+h.signedQuery())
	// A redirect's Content-Length is its own (empty) body's, never the file's.
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusFound)
}

// signedQuery is the query of a presigned S3 URL, as the hub's redirects to its CDN carry.
func (h *Hub) signedQuery() string {
	return "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAHUBTEST%2F" + time.Now().UTC().Format("20060102") +
		"%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=" + time.Now().UTC().Format("20060102T150405Z") +
		"&X-Amz-Expires=3600&X-Amz-Signature=" + h.Signature + "&X-Amz-SignedHeaders=host"
}

// find resolves repo, revision and file; status is non-zero for an error answer. Called with mu held.
func (h *Hub) find(r *http.Request, repoID, rev, name string) (string, file, int, string) {
	rp := h.repos[repoID]
	if rp == nil {
		return "", file{}, http.StatusUnauthorized, "RepoNotFound" // the hub answers 401 for a repo it does not show
	}
	if rp.gatedToken != "" && r.Header.Get("Authorization") != "Bearer "+rp.gatedToken {
		return "", file{}, http.StatusUnauthorized, "GatedRepo"
	}
	commit := rev
	if c, ok := rp.branches[rev]; ok {
		commit = c
	}
	files := rp.commits[commit]
	if files == nil {
		return "", file{}, http.StatusNotFound, "RevisionNotFound"
	}
	f, ok := files[name]
	if !ok && name != "" {
		return "", file{}, http.StatusNotFound, "EntryNotFound"
	}
	return commit, f, 0, ""
}

func (h *Hub) serveAPI(w http.ResponseWriter, r *http.Request, rest string) {
	// OWNER/REPO/revision/REVISION
	parts := strings.SplitN(rest, "/", 4)
	if len(parts) != 4 || parts[2] != "revision" {
		hubError(w, http.StatusNotFound, "", "no such route")
		return
	}
	repoID := parts[0] + "/" + parts[1]
	h.mu.Lock()
	commit, _, status, code := h.find(r, repoID, parts[3], "")
	type lfs struct {
		SHA256      string `json:"sha256"`
		Size        int    `json:"size,omitempty"`
		PointerSize int    `json:"pointerSize"`
	}
	type sibling struct {
		RFilename string `json:"rfilename"`
		Size      int    `json:"size,omitempty"`
		BlobID    string `json:"blobId,omitempty"`
		LFS       *lfs   `json:"lfs,omitempty"`
	}
	var siblings []sibling
	if status == 0 {
		for name, f := range h.repos[repoID].commits[commit] {
			s := sibling{RFilename: name}
			if r.URL.Query().Get("blobs") == "true" {
				s.Size = len(f.data)
				if h.noSize {
					s.Size = 0
				}
				s.BlobID = gitBlobID(f.data)
				if f.lfs {
					sum := sha256.Sum256(f.data)
					oid := hex.EncodeToString(sum[:])
					s.BlobID = gitBlobID(pointer(oid, len(f.data)))
					s.LFS = &lfs{SHA256: oid, Size: s.Size, PointerSize: len(pointer(oid, len(f.data)))}
				}
			}
			siblings = append(siblings, s)
		}
	}
	h.mu.Unlock()
	if status != 0 {
		hubError(w, status, code, code)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": repoID, "modelId": repoID, "sha": commit, "siblings": siblings})
}

func (h *Hub) serveCDN(w http.ResponseWriter, r *http.Request) {
	if h.record("cdn", r) {
		http.Error(w, "upstream unavailable", http.StatusServiceUnavailable)
		return
	}
	oid, ok := strings.CutPrefix(r.URL.Path, "/blobs/")
	h.mu.Lock()
	data, found := h.blobs[oid]
	hangup := h.hangups > 0
	if hangup {
		h.hangups--
	}
	cut := int64(-1)
	if h.cuts > 0 {
		h.cuts--
		cut = h.cutAfter
	}
	trickle := h.trickle
	if found && h.overlong > 0 {
		data = append(bytes.Clone(data), make([]byte, h.overlong)...)
	}
	if found && h.corrupt > 0 {
		h.corrupt--
		data = bytes.Clone(data)
		for i := range data {
			data[i] ^= 0x5a
		}
	}
	h.mu.Unlock()
	if hangup {
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
		return
	}
	if r.URL.Query().Get("X-Amz-Signature") != h.Signature {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, "<Error><Code>SignatureDoesNotMatch</Code></Error>")
		return
	}
	if !ok || !found || r.Method != http.MethodGet {
		http.Error(w, "no such blob", http.StatusNotFound)
		return
	}
	if trickle > 0 {
		h.serveTrickle(w, r, data, trickle)
		return
	}
	if cut < 0 {
		http.ServeContent(w, r, "", time.Unix(0, 0), bytes.NewReader(data))
		return
	}
	// Announce the whole rest, send part of it, and drop the connection.
	start := int64(0)
	if rg := r.Header.Get("Range"); rg != "" {
		if v, ok := strings.CutPrefix(rg, "bytes="); ok {
			start, _ = strconv.ParseInt(strings.TrimSuffix(v, "-"), 10, 64)
		}
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, len(data)-1, len(data)))
		w.Header().Set("Content-Length", strconv.FormatInt(int64(len(data))-start, 10))
		w.WriteHeader(http.StatusPartialContent)
	} else {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.WriteHeader(http.StatusOK)
	}
	end := min(start+cut, int64(len(data)))
	_, _ = w.Write(data[start:end])
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close()
		}
	}
}

// serveTrickle sends data from the requested offset one byte per interval until it is all
// sent or the client goes away.
func (h *Hub) serveTrickle(w http.ResponseWriter, r *http.Request, data []byte, every time.Duration) {
	start := int64(0)
	if v, ok := strings.CutPrefix(r.Header.Get("Range"), "bytes="); ok {
		start, _ = strconv.ParseInt(strings.TrimSuffix(v, "-"), 10, 64)
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, len(data)-1, len(data)))
		w.Header().Set("Content-Length", strconv.FormatInt(int64(len(data))-start, 10))
		w.WriteHeader(http.StatusPartialContent)
	} else {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.WriteHeader(http.StatusOK)
	}
	fl := w.(http.Flusher)
	t := time.NewTicker(every)
	defer t.Stop()
	for i := start; i < int64(len(data)); i++ {
		if _, err := w.Write(data[i : i+1]); err != nil {
			return
		}
		fl.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		}
	}
}

// pointer is the Git LFS pointer file the repository stores in place of an LFS object.
func pointer(oid string, size int) []byte {
	return fmt.Appendf(nil, "version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", oid, size)
}

// gitBlobID is git's object id of a blob: SHA-1 of "blob LEN\0" + data.
func gitBlobID(data []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(data))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}
