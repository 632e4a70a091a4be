package modelfetch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/internal/filelock"
	"github.com/toolmesh/toolmesh/internal/redact"
)

// Environment variables the fetcher reads: the same names Hugging Face's own client reads.
const (
	EnvEndpoint = "HF_ENDPOINT"
	EnvToken    = "HF_TOKEN"
)

// DefaultEndpoint is the hub when HF_ENDPOINT is not set.
const DefaultEndpoint = "https://huggingface.co"

// Errors a pull can end with that trying again will not fix; match them with errors.Is.
var (
	// ErrIntegrity: the bytes (or the hub's statement about them) are not the ones expected.
	// The download is removed.
	ErrIntegrity = errors.New("model file failed verification")
	// ErrRevision: the hub answered for another commit than the pinned one.
	ErrRevision = errors.New("the hub answered another revision")
	// ErrAccess: the hub refused access (a gated or private repository).
	ErrAccess = errors.New("the hub refused access")
	// ErrNotFound: no such repository, revision or file on the hub.
	ErrNotFound = errors.New("not found on the hub")
	// ErrSpace: the models folder's disk has less room than the file still needs.
	ErrSpace = errors.New("not enough free disk space")
	// ErrDeadline: the pull took longer than its deadline (Fetcher.Deadline). It is not
	// Permanent: what was downloaded is kept, and the next pull resumes it.
	ErrDeadline = errors.New("the download took longer than its deadline")
)

// Permanent reports whether err is one that retrying will not fix.
func Permanent(err error) bool {
	return errors.Is(err, ErrIntegrity) || errors.Is(err, ErrRevision) || errors.Is(err, ErrAccess) ||
		errors.Is(err, ErrNotFound) || errors.Is(err, ErrSpace)
}

// Fetcher downloads model files from a Hugging Face hub the way its own client does: HEAD on
// .../resolve/REVISION/FILE without following redirects reads the commit (X-Repo-Commit), the
// SHA-256 of an LFS file (X-Linked-Etag) and its size (X-Linked-Size), then the bytes come
// from where the redirect points (a CDN), without the token, resumed with Range.
type Fetcher struct {
	// Endpoint is the hub's base URL (HF_ENDPOINT); empty means DefaultEndpoint.
	Endpoint string
	// Token is sent as "Authorization: Bearer TOKEN" to the hub only, never to another host.
	// It never appears in logs or errors.
	Token string
	// Client sends the requests; nil means a private one. Its redirect policy is not used:
	// the fetcher follows redirects itself, so it decides where the token goes.
	Client *http.Client
	// Logger gets retries and warnings; nil discards.
	Logger *slog.Logger
	// Progress, when set, is called as bytes arrive (at most every ProgressEvery) and once
	// when the file is complete.
	Progress func(Progress)

	// Attempts bounds the tries without progress (a try that downloaded bytes does not count);
	// default 5. BackoffMin and BackoffMax shape the waits between them (1 s doubling to 30 s).
	Attempts               int
	BackoffMin, BackoffMax time.Duration
	// MetaTimeout bounds each metadata request (HEAD, model API); default 30 s.
	MetaTimeout time.Duration
	// IdleTimeout ends a download that receives nothing for that long (it is then resumed);
	// default 60 s.
	IdleTimeout time.Duration
	// ProgressEvery is the least time between two Progress calls; default 200 ms.
	ProgressEvery time.Duration
	// Deadline bounds a whole Pull, its retries included, from the moment the file's size is
	// known; default PullDeadline(size). The idle timeout alone let a server that sends a
	// byte a minute hold a pull forever.
	Deadline time.Duration
	// FreeSpace says how many bytes the disk holding dir has free for this user, or -1 when
	// it cannot tell; nil asks the file system. A pull that would not fit is refused before
	// it starts, rather than failing hours later with a full disk.
	FreeSpace func(dir string) (int64, error)
}

// Rates behind PullDeadline.
const (
	deadlineBase = 10 * time.Minute
	minRate      = 100_000 // bytes per second
)

// PullDeadline is the default deadline of a pull of size bytes: 10 minutes plus the time the
// file takes at 100 kB/s (about 12 hours for a 4.3 GB model). A slower line can still get the
// file over several pulls, each resuming where the last stopped.
func PullDeadline(size int64) time.Duration {
	return deadlineBase + time.Duration(size/minRate)*time.Second + time.Duration(size%minRate)*time.Second/minRate
}

// Hub is the model hub a service pulls from: its base URL (HF_ENDPOINT, may carry
// user:password; empty means DefaultEndpoint) and token (HF_TOKEN). Services get it as config;
// the composition root and the CLI read the environment (HubFromEnv).
type Hub struct {
	Endpoint string
	Token    string
}

// HubFromEnv is the hub HF_ENDPOINT and HF_TOKEN name.
func HubFromEnv() Hub { return Hub{Endpoint: os.Getenv(EnvEndpoint), Token: os.Getenv(EnvToken)} }

// Fetcher is a Fetcher for the hub.
func (h Hub) Fetcher(logger *slog.Logger) *Fetcher {
	return &Fetcher{Endpoint: h.Endpoint, Token: h.Token, Logger: logger}
}

// FetcherFromEnv returns a Fetcher for HF_ENDPOINT with the token in HF_TOKEN.
func FetcherFromEnv(logger *slog.Logger) *Fetcher { return HubFromEnv().Fetcher(logger) }

// Hub is the base URL requests go to, its credentials (HF_ENDPOINT's user:password) masked:
// for logs, messages, manifests and the cache's Lookup.
func (f *Fetcher) Hub() string { return redact.URL(f.endpoint()) }

func (f *Fetcher) endpoint() string {
	if f.Endpoint == "" {
		return DefaultEndpoint
	}
	return strings.TrimRight(f.Endpoint, "/")
}

func (f *Fetcher) log() *slog.Logger {
	if f.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return f.Logger
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// client never follows redirects: each hop is decided by the fetcher.
func (f *Fetcher) client() *http.Client {
	c := http.Client{Transport: http.DefaultTransport}
	if f.Client != nil {
		c = *f.Client
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

// Progress is the state of one download.
type Progress struct {
	// File is the file's name in its repository.
	File string
	// Done and Total are bytes; Total is 0 when the hub did not say.
	Done, Total int64
	// Rate is bytes per second since this download (this process) started.
	Rate float64
	// ETA is the time left at that rate; 0 when unknown.
	ETA time.Duration
	// Complete is set on the last call, once every byte is in.
	Complete bool
}

// Pull fetches r into the cache, verifies it and returns its entry; a verified file already
// there is returned without downloading it again. It retries what a retry can fix, with
// backoff, resuming where the last try stopped.
func (f *Fetcher) Pull(ctx context.Context, c Cache, r Ref) (Entry, error) {
	if r.Local() {
		return Entry{}, fmt.Errorf("%s is a local file: nothing to pull", r.Path)
	}
	attempts := orDefault(f.Attempts, 5)
	backoff := orDefault(f.BackoffMin, time.Second)

	// The deadline is armed once the first answer states the file's size.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var deadline *time.Timer
	defer func() {
		if deadline != nil {
			deadline.Stop()
		}
	}()
	arm := func(size int64) {
		if deadline == nil {
			limit := orDefault(f.Deadline, PullDeadline(size))
			deadline = time.AfterFunc(limit, func() {
				cancel(fmt.Errorf("%w of %s: the connection is too slow, or stalls", ErrDeadline, limit))
			})
		}
	}
	late := func() error {
		if cause := context.Cause(ctx); errors.Is(cause, ErrDeadline) {
			return fmt.Errorf("%s: %w; the bytes that came are kept, and pulling again resumes from there", r, cause)
		}
		return nil
	}

	var lastErr error
	for tries, failures := 0, 0; ; tries++ {
		e, progressed, err := f.pullOnce(ctx, c, r, arm)
		if err == nil {
			return e, nil
		}
		if lerr := late(); lerr != nil {
			return Entry{}, lerr
		}
		if Permanent(err) || ctx.Err() != nil {
			return Entry{}, err
		}
		if tries == 0 && !progressed && errors.Is(err, ErrUnreachable) {
			// Nothing answered at all: offline, or HF_ENDPOINT names no hub. Retrying for
			// half a minute only delays saying so; a caller that waits for the network
			// (toolmesh up) retries with its own, longer backoff.
			return Entry{}, err
		}
		lastErr = err
		if progressed {
			failures, backoff = 0, orDefault(f.BackoffMin, time.Second)
		}
		failures++
		if failures >= attempts {
			// The reference once: lastErr starts with it.
			return Entry{}, fmt.Errorf("%w; giving up after %d tries", lastErr, attempts)
		}
		wait := time.Duration(float64(backoff) * (0.8 + 0.4*rand.Float64()))
		f.log().Warn("model download failed; trying again", "model", r.String(), "err", err, "retry_in", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			if lerr := late(); lerr != nil {
				return Entry{}, lerr
			}
			return Entry{}, fmt.Errorf("%s: %w (last error: %v)", r, ctx.Err(), lastErr)
		case <-time.After(wait):
		}
		backoff = min(2*backoff, orDefault(f.BackoffMax, 30*time.Second))
	}
}

// meta is what the hub states about a file at a revision.
type meta struct {
	commit   string
	etag     string // normalized: no W/, no quotes
	size     int64  // -1 when not stated (X-Linked-Size, or the Content-Length of the file itself)
	location string // where the bytes are: the resolve URL itself, or the redirect's target
}

// resolveURL is ENDPOINT/OWNER/REPO/resolve/REVISION/FILE, each part escaped.
func (f *Fetcher) resolveURL(r Ref) string {
	segs := strings.Split(r.File, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return f.endpoint() + "/" + r.Repo + "/resolve/" + url.PathEscape(r.Revision) + "/" + strings.Join(segs, "/")
}

// sameOrigin says whether u is on the hub itself (scheme, host and port), where the token may go.
func (f *Fetcher) sameOrigin(u *url.URL) bool {
	hub, err := url.Parse(f.endpoint())
	return err == nil && strings.EqualFold(hub.Scheme, u.Scheme) && strings.EqualFold(hub.Host, u.Host)
}

func (f *Fetcher) newRequest(ctx context.Context, method, raw string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, raw, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", "toolmesh")
	if f.Token != "" && f.sameOrigin(req.URL) {
		req.Header.Set("Authorization", "Bearer "+f.Token)
	}
	return req, nil
}

// head reads the file's metadata. Redirects to the hub itself (a renamed repository) are
// followed; a redirect elsewhere is where the bytes are and is not followed.
func (f *Fetcher) head(ctx context.Context, r Ref) (meta, error) {
	ctx, cancel := context.WithTimeout(ctx, orDefault(f.MetaTimeout, 30*time.Second))
	defer cancel()
	target := f.resolveURL(r)
	hc := f.client()
	for hops := 0; hops < 5; hops++ {
		req, err := f.newRequest(ctx, http.MethodHead, target)
		if err != nil {
			return meta{}, err
		}
		req.Header.Set("Accept-Encoding", "identity")
		resp, err := hc.Do(req)
		if err != nil {
			return meta{}, f.transportError(r, "HEAD", target, err)
		}
		resp.Body.Close()
		if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			loc, err := resp.Location()
			if err != nil {
				return meta{}, fmt.Errorf("%s: HEAD %s: %d without a valid Location", r, redact.URL(target), resp.StatusCode)
			}
			if f.sameOrigin(loc) && strings.Contains(loc.Path, "/resolve/") {
				target = loc.String()
				continue
			}
			return f.metaFrom(r, resp, loc.String())
		}
		if resp.StatusCode == http.StatusOK {
			return f.metaFrom(r, resp, target)
		}
		return meta{}, f.statusError(r, "HEAD", target, resp)
	}
	return meta{}, fmt.Errorf("%s: HEAD %s: too many redirects", r, redact.URL(f.resolveURL(r)))
}

func (f *Fetcher) metaFrom(r Ref, resp *http.Response, location string) (meta, error) {
	m := meta{location: location, size: -1}
	m.commit = resp.Header.Get("X-Repo-Commit")
	if !commitID.MatchString(m.commit) {
		return meta{}, fmt.Errorf("%s: the hub's answer has no commit id (X-Repo-Commit %q): is %s a Hugging Face hub?", r, m.commit, f.Hub())
	}
	if r.Pinned() && m.commit != r.Revision {
		return meta{}, fmt.Errorf("%s: %w: asked for commit %s, the hub answered for %s; refusing the file", r, ErrRevision, r.Revision, m.commit)
	}
	etag := resp.Header.Get("X-Linked-Etag")
	if etag == "" {
		etag = resp.Header.Get("ETag")
	}
	m.etag = strings.Trim(strings.TrimPrefix(etag, "W/"), `"`)
	size := resp.Header.Get("X-Linked-Size")
	if size == "" && resp.StatusCode == http.StatusOK {
		// The file itself answered. A redirect's Content-Length is its own body's, not the file's.
		size = resp.Header.Get("Content-Length")
	}
	if n, err := strconv.ParseInt(size, 10, 64); err == nil && n >= 0 {
		m.size = n
	}
	return m, nil
}

// statusError explains a refusal of the hub; 401 and 403 name HF_TOKEN.
func (f *Fetcher) statusError(r Ref, method, target string, resp *http.Response) error {
	code := resp.Header.Get("X-Error-Code")
	msg := resp.Header.Get("X-Error-Message")
	detail := strconv.Itoa(resp.StatusCode) + " " + http.StatusText(resp.StatusCode)
	if code != "" {
		detail += " (" + code + ")"
	}
	if msg != "" && msg != http.StatusText(resp.StatusCode) {
		detail += ": " + msg
	}
	switch {
	case code == "RepoNotFound":
		return fmt.Errorf("%s: %w: repository %s (or it is private and %s does not open it): %s", r, ErrNotFound, r.Repo, EnvToken, detail)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		if f.Token == "" {
			return fmt.Errorf("%s: %w: %s: the repository %s is gated or private; set %s to a token that may read it", r, ErrAccess, detail, r.Repo, EnvToken)
		}
		return fmt.Errorf("%s: %w: %s: the token in %s may not read %s (accept its terms on the hub, or use another token)", r, ErrAccess, detail, EnvToken, r.Repo)
	case resp.StatusCode == http.StatusNotFound:
		what := fmt.Sprintf("repository %s, revision %s or file %s", r.Repo, r.Revision, r.File)
		switch code {
		case "RepoNotFound":
			what = "repository " + r.Repo
		case "RevisionNotFound":
			what = "revision " + r.Revision + " of " + r.Repo
		case "EntryNotFound":
			what = "file " + r.File + " at revision " + r.Revision
		}
		return fmt.Errorf("%s: %w: %s (%s %s: %s)", r, ErrNotFound, what, method, redact.URL(target), detail)
	}
	// A hub in trouble (5xx, a proxy's error page): who answered what, not the URL, which
	// only repeats the reference.
	return fmt.Errorf("%s: %s answered %s with %s", r, f.server(target), method, detail)
}

// apiMeta asks the model API for the file's LFS SHA-256 ("" for a plain git file) and size
// (0 when not listed) at commit.
func (f *Fetcher) apiMeta(ctx context.Context, r Ref, commit string) (string, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, orDefault(f.MetaTimeout, 30*time.Second))
	defer cancel()
	target := f.endpoint() + "/api/models/" + r.Repo + "/revision/" + commit + "?blobs=true"
	req, err := f.newRequest(ctx, http.MethodGet, target)
	if err != nil {
		return "", 0, err
	}
	resp, err := f.client().Do(req)
	if err != nil {
		return "", 0, f.transportError(r, "the model API request", target, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", 0, f.statusError(r, "GET", target, resp)
	}
	var info struct {
		SHA      string `json:"sha"`
		Siblings []struct {
			RFilename string `json:"rfilename"`
			Size      int64  `json:"size"`
			LFS       *struct {
				SHA256 string `json:"sha256"`
				Size   int64  `json:"size"`
			} `json:"lfs"`
		} `json:"siblings"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&info); err != nil {
		return "", 0, fmt.Errorf("%s: model API: %w", r, err)
	}
	if info.SHA != "" && info.SHA != commit {
		return "", 0, fmt.Errorf("%s: %w: the model API answered for commit %s, not %s", r, ErrRevision, info.SHA, commit)
	}
	for _, s := range info.Siblings {
		switch {
		case s.RFilename != r.File:
		case s.LFS != nil:
			return strings.ToLower(s.LFS.SHA256), s.LFS.Size, nil
		default:
			return "", s.Size, nil
		}
	}
	return "", 0, nil
}

// expect decides the SHA-256 and size the bytes must have, and where that comes from.
func (f *Fetcher) expect(ctx context.Context, r Ref, m meta) (sum string, size int64, source string, err error) {
	hubSum, hubSize := "", m.size
	if sha256ID.MatchString(strings.ToLower(m.etag)) {
		hubSum = strings.ToLower(m.etag)
	}
	// Not an LFS object id (a plain git file's ETag is its git SHA-1), or no size stated and
	// none pinned: the model API lists both.
	if hubSum == "" || (hubSize < 0 && r.Size == 0) {
		s, n, err := f.apiMeta(ctx, r, m.commit)
		if err != nil {
			return "", 0, "", err
		}
		if hubSum == "" {
			hubSum = s
		}
		if hubSize < 0 && n > 0 {
			hubSize = n
		}
	}
	switch {
	case r.SHA256 != "" && hubSum != "" && r.SHA256 != hubSum:
		return "", 0, "", fmt.Errorf("%s: %w: the hub states sha256 %s for %s at %s, but %s is pinned; refusing to download",
			r, ErrIntegrity, hubSum, r.File, m.commit, r.SHA256)
	case r.SHA256 != "":
		sum, source = r.SHA256, "reference"
		if r.Name != "" {
			source = "registry"
		}
	case hubSum != "":
		sum, source = hubSum, "hub"
	default:
		return "", 0, "", fmt.Errorf("%s: %w: the hub states no SHA-256 for %s at %s (not an LFS file?); pin one: %s%s/%s@%s#sha256:HEX",
			r, ErrIntegrity, r.File, m.commit, Scheme, r.Repo, r.File, m.commit)
	}
	size = hubSize
	if r.Size > 0 {
		if hubSize >= 0 && hubSize != r.Size {
			return "", 0, "", fmt.Errorf("%s: %w: the hub states %d bytes, %d are pinned", r, ErrIntegrity, hubSize, r.Size)
		}
		size = r.Size
	}
	if size < 0 {
		// Without a size nothing bounds the download: a server could fill the disk.
		return "", 0, "", fmt.Errorf("%s: %w: the hub states no size for %s at %s (no X-Linked-Size, and the model API lists none), so nothing would bound the download; refusing it. Is %s a Hugging Face hub, or a mirror that passes its headers on?",
			r, ErrIntegrity, r.File, m.commit, f.Hub())
	}
	return sum, size, source, nil
}

const (
	partSuffix = ".part"
	lockSuffix = ".lock"
)

// pullOnce is one try; progressed says whether it added bytes to the partial download. It
// calls arm with the file's size once it is known.
func (f *Fetcher) pullOnce(ctx context.Context, c Cache, r Ref, arm func(size int64)) (Entry, bool, error) {
	m, err := f.head(ctx, r)
	if err != nil {
		return Entry{}, false, err
	}
	sum, size, source, err := f.expect(ctx, r, m)
	if err != nil {
		return Entry{}, false, err
	}
	arm(size)
	final := c.FilePath(r.Repo, m.commit, r.File)
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return Entry{}, false, fmt.Errorf("models folder: %w", err)
	}
	// Two processes pulling the same file (model-init and a user's `toolmesh model pull`) do
	// not write one .part file at once: the second waits, then finds the file verified.
	unlock, err := filelock.Lock(ctx, final+lockSuffix)
	if err != nil {
		return Entry{}, false, err
	}
	defer unlock()
	if e, ok, err := c.entry(final); err == nil && ok && e.SHA256 == sum {
		e.Ref = r
		return e, false, nil // another process pulled it meanwhile
	}
	part := final + partSuffix
	if err := f.checkSpace(r, filepath.Dir(final), part, size); err != nil {
		return Entry{}, false, err
	}
	h, written, err := f.download(ctx, r, m.location, part, size)
	if err != nil {
		return Entry{}, written > 0, err
	}
	got := hex.EncodeToString(h)
	if got != sum {
		_ = os.Remove(part)
		return Entry{}, true, fmt.Errorf("%s: %w: the downloaded bytes have sha256 %s, want %s (from the %s); the download was removed",
			r, ErrIntegrity, got, sum, source)
	}
	fi, err := os.Stat(part)
	if err != nil {
		return Entry{}, true, err
	}
	if fi.Size() != size {
		_ = os.Remove(part)
		return Entry{}, true, fmt.Errorf("%s: %w: downloaded %d bytes, want %d; the download was removed", r, ErrIntegrity, fi.Size(), size)
	}
	e := Entry{
		Ref: r, Path: final, Name: r.Name, Repo: r.Repo, File: r.File, Revision: r.Revision, Commit: m.commit,
		SHA256: sum, Size: fi.Size(), Endpoint: f.Hub(), PulledAt: time.Now().UTC(), Verified: source,
	}
	// The old manifest (of another hub's file, say) goes first, so that it never describes
	// the new bytes; a file without a manifest is not trusted, and the next pull replaces it.
	if err := os.Remove(final + manifestSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Entry{}, true, fmt.Errorf("%s: replacing its manifest: %w", r, err)
	}
	if err := os.Rename(part, final); err != nil {
		return Entry{}, true, err
	}
	if err := c.writeManifest(e); err != nil {
		return Entry{}, true, fmt.Errorf("%s: writing its manifest: %w", r, err)
	}
	return e, true, nil
}

// checkSpace refuses a download the models folder's disk has no room for: the file's size,
// less what an earlier try left in part.
func (f *Fetcher) checkSpace(r Ref, dir, part string, size int64) error {
	need := size
	if fi, err := os.Stat(part); err == nil && fi.Size() <= size {
		need -= fi.Size()
	}
	freeSpace := f.FreeSpace
	if freeSpace == nil {
		freeSpace = diskFree
	}
	free, err := freeSpace(dir)
	if err != nil {
		f.log().Warn("cannot tell the free disk space; downloading anyway", "dir", dir, "err", err)
		return nil
	}
	if free < 0 || free >= need {
		return nil
	}
	return fmt.Errorf("%s: %w: %s needs %s more in %s, and %s is free there; free some space, or put the models on a larger disk (--models-dir, or %s)",
		r, ErrSpace, r.File, Bytes(need), dir, Bytes(free), EnvDir)
}

var errIdle = errors.New("no bytes received")

// bare is err without the URL Go's client quotes in it (*url.Error): a CDN's URL carries its
// signature in the query, and the hub's may carry HF_ENDPOINT's credentials. Callers name the
// URL themselves, through redact.URL.
func bare(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// download appends to part from where it ends (Range), hashing as it goes; it returns the
// SHA-256 of the whole part file and how many bytes this call added.
func (f *Fetcher) download(ctx context.Context, r Ref, location, part string, size int64) ([]byte, int64, error) {
	out, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, 0, err
	}
	defer out.Close()
	h := sha256.New()
	offset, err := io.Copy(h, out) // the bytes kept from an earlier try
	if err != nil {
		return nil, 0, fmt.Errorf("reading %s: %w", part, err)
	}
	if offset > size {
		// Longer than the file can be: not a prefix of it.
		if err := out.Truncate(0); err != nil {
			return nil, 0, err
		}
		if _, err := out.Seek(0, io.SeekStart); err != nil {
			return nil, 0, err
		}
		h.Reset()
		offset = 0
	}
	if offset == size {
		return h.Sum(nil), 0, nil
	}

	idle := orDefault(f.IdleTimeout, time.Minute)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watchdog := time.AfterFunc(idle, func() { cancel(fmt.Errorf("%w for %s", errIdle, idle)) })
	defer watchdog.Stop()

	resp, err := f.get(ctx, r, location, offset)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusPartialContent:
		if start := contentRangeStart(resp.Header.Get("Content-Range")); start != offset {
			return nil, 0, fmt.Errorf("%s: asked for bytes from %d, got a range from %d", r, offset, start)
		}
	case http.StatusOK:
		if offset > 0 {
			f.log().Info("the server does not resume downloads; starting again", "model", r.String())
			if err := out.Truncate(0); err != nil {
				return nil, 0, err
			}
			h.Reset()
			offset = 0
		}
	case http.StatusRequestedRangeNotSatisfiable:
		// The part is longer than the file, or the server forgot it: start over next try.
		_ = out.Truncate(0)
		return nil, 0, fmt.Errorf("%s: range from %d not satisfiable; starting again", r, offset)
	default:
		return nil, 0, f.statusError(r, "GET", location, resp)
	}
	if resp.ContentLength > size-offset {
		_ = out.Close()
		_ = os.Remove(part)
		return nil, 0, fmt.Errorf("%s: %w: the server announces %d bytes from byte %d, more than the %d bytes expected; the download was removed",
			r, ErrIntegrity, resp.ContentLength, offset, size)
	}
	if _, err := out.Seek(offset, io.SeekStart); err != nil {
		return nil, 0, err
	}

	report := f.reporter(r, offset, size)
	buf := make([]byte, 1<<20)
	var written int64
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			watchdog.Reset(idle)
			if offset+written+int64(n) > size {
				_ = out.Close()
				_ = os.Remove(part)
				return nil, written, fmt.Errorf("%s: %w: the server sends more than the %d bytes expected; the download was removed", r, ErrIntegrity, size)
			}
			if _, err := out.Write(buf[:n]); err != nil {
				return nil, written, fmt.Errorf("writing %s: %w", part, err)
			}
			h.Write(buf[:n])
			written += int64(n)
			report(offset+written, false)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if ctx.Err() != nil {
				rerr = context.Cause(ctx) // the idle timer's, the pull's deadline, or the caller's
			}
			return nil, written, fmt.Errorf("%s: download cut after %d bytes: %w", r, offset+written, bare(rerr))
		}
	}
	if offset+written < size {
		return nil, written, fmt.Errorf("%s: download ended at %d of %d bytes", r, offset+written, size)
	}
	if err := out.Sync(); err != nil {
		return nil, written, err
	}
	report(offset+written, true)
	return h.Sum(nil), written, nil
}

// get fetches the bytes from offset on. Redirects are followed by hand: the token goes only
// to the hub's own origin, never to the CDN a redirect points at.
func (f *Fetcher) get(ctx context.Context, r Ref, location string, offset int64) (*http.Response, error) {
	hc := f.client()
	target := location
	for hops := 0; hops < 5; hops++ {
		req, err := f.newRequest(ctx, http.MethodGet, target)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept-Encoding", "identity")
		if offset > 0 {
			req.Header.Set("Range", "bytes="+strconv.FormatInt(offset, 10)+"-")
		}
		resp, err := hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				err = context.Cause(ctx)
			}
			return nil, f.transportError(r, "GET", target, err)
		}
		if resp.StatusCode < 300 || resp.StatusCode >= 400 {
			return resp, nil
		}
		loc, err := resp.Location()
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: GET %s: %d without a valid Location", r, redact.URL(target), resp.StatusCode)
		}
		target = loc.String()
	}
	return nil, fmt.Errorf("%s: GET %s: too many redirects", r, redact.URL(location))
}

// reporter calls f.Progress at most every ProgressEvery, and always for the last call.
func (f *Fetcher) reporter(r Ref, start, total int64) func(done int64, complete bool) {
	if f.Progress == nil {
		return func(int64, bool) {}
	}
	every := orDefault(f.ProgressEvery, 200*time.Millisecond)
	began := time.Now()
	var last time.Time
	if total < 0 {
		total = 0
	}
	return func(done int64, complete bool) {
		now := time.Now()
		if !complete && now.Sub(last) < every {
			return
		}
		last = now
		p := Progress{File: r.File, Done: done, Total: total, Complete: complete}
		if el := now.Sub(began).Seconds(); el > 0 {
			p.Rate = float64(done-start) / el
		}
		if p.Rate > 0 && total > done {
			p.ETA = time.Duration(float64(total-done) / p.Rate * float64(time.Second))
		}
		f.Progress(p)
	}
}

// contentRangeStart reads the first byte of "bytes START-END/TOTAL"; -1 when unreadable.
func contentRangeStart(v string) int64 {
	v, ok := strings.CutPrefix(v, "bytes ")
	if !ok {
		return -1
	}
	start, _, ok := strings.Cut(v, "-")
	if !ok {
		return -1
	}
	n, err := strconv.ParseInt(start, 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// Ensure returns the path of r's file: a local file as it is (it must be a GGUF file, see
// CheckFile), a cached file at once, and otherwise what Pull fetches.
func Ensure(ctx context.Context, f *Fetcher, c Cache, r Ref) (string, error) {
	if r.Local() {
		if err := CheckFile(r.Path); err != nil {
			return "", err
		}
		return r.Path, nil
	}
	if e, ok, err := c.Lookup(r, f.Hub()); err != nil {
		return "", err
	} else if ok {
		return e.Path, nil
	}
	e, err := f.Pull(ctx, c, r)
	if err != nil {
		return "", err
	}
	return e.Path, nil
}
