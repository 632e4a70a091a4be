package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// EnvDir names the models folder, for every command; a flag given on the command line wins.
const EnvDir = "TOOLMESH_MODELS_DIR"

// DefaultDir is $TOOLMESH_MODELS_DIR, else the user's cache folder + toolmesh/models
// (~/.cache/toolmesh/models on Linux, ~/Library/Caches/toolmesh/models on macOS).
func DefaultDir() (string, error) {
	if d := os.Getenv(EnvDir); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no folder for models: %w (set %s)", err, EnvDir)
	}
	return filepath.Join(base, "toolmesh", "models"), nil
}

// Cache is a folder of verified model files: DIR/OWNER/REPO/COMMIT/FILE, each with a
// FILE.toolmesh.json manifest written once the file passed verification. A file without its
// manifest is not trusted.
type Cache struct {
	Dir string
}

const manifestSuffix = ".toolmesh.json"

// Entry is one verified model file in the cache.
type Entry struct {
	// Ref is the reference it was pulled by (its Revision as requested, e.g. a branch).
	Ref Ref `json:"-"`
	// Path is the file.
	Path string `json:"-"`

	Name     string    `json:"name,omitempty"`
	Repo     string    `json:"repo"`
	File     string    `json:"file"`
	Revision string    `json:"revision"`
	Commit   string    `json:"commit"`
	SHA256   string    `json:"sha256"`
	Size     int64     `json:"size"`
	Endpoint string    `json:"endpoint"`
	PulledAt time.Time `json:"pulled_at"`
	// Verified says what the bytes were checked against: "registry", "reference" or "hub".
	Verified string `json:"verified_against"`
}

// FilePath is where the file of repo at commit lives in the cache.
func (c Cache) FilePath(repo, commit, file string) string {
	return filepath.Join(c.Dir, filepath.FromSlash(repo), commit, filepath.FromSlash(file))
}

// Lookup finds the verified file for r: for a pinned reference the file of that commit, for a
// branch or tag the newest file pulled by that name. It trusts the manifest and checks only
// the size, so a 4 GB model is not hashed again on every start.
func (c Cache) Lookup(r Ref) (Entry, bool, error) {
	if r.Local() {
		return Entry{}, false, errors.New("a local file is not in the cache")
	}
	var dirs []string
	if r.Pinned() {
		dirs = []string{r.Revision}
	} else {
		all, err := os.ReadDir(filepath.Join(c.Dir, filepath.FromSlash(r.Repo)))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return Entry{}, false, err
		}
		for _, d := range all {
			if d.IsDir() && commitID.MatchString(d.Name()) {
				dirs = append(dirs, d.Name())
			}
		}
	}
	var best Entry
	found := false
	for _, commit := range dirs {
		e, ok, err := c.entry(c.FilePath(r.Repo, commit, r.File))
		if err != nil {
			return Entry{}, false, err
		}
		if !ok || (!r.Pinned() && e.Revision != r.Revision) || (r.SHA256 != "" && e.SHA256 != r.SHA256) {
			continue
		}
		if !found || e.PulledAt.After(best.PulledAt) {
			best, found = e, true
		}
	}
	if found {
		best.Ref = r
	}
	return best, found, nil
}

// entry reads the manifest of the file at p; ok is false when either is missing or the
// file's size is not the manifest's.
func (c Cache) entry(p string) (Entry, bool, error) {
	data, err := os.ReadFile(p + manifestSuffix)
	if errors.Is(err, fs.ErrNotExist) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, err
	}
	var e Entry
	if err := json.Unmarshal(data, &e); err != nil {
		return Entry{}, false, fmt.Errorf("%s: %w", p+manifestSuffix, err)
	}
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, err
	}
	if !fi.Mode().IsRegular() || fi.Size() != e.Size {
		return Entry{}, false, nil
	}
	e.Path = p
	e.Ref = Ref{Name: e.Name, Repo: e.Repo, File: e.File, Revision: e.Revision, SHA256: e.SHA256}
	return e, true, nil
}

// writeManifest records a verified file; it is written to a temporary name and renamed, so a
// reader never sees half of it.
func (c Cache) writeManifest(e Entry) error {
	data, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return err
	}
	tmp := e.Path + manifestSuffix + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, e.Path+manifestSuffix)
}

// List returns every verified file in the cache, by name then path.
func (c Cache) List() ([]Entry, error) {
	var out []Entry
	err := filepath.WalkDir(c.Dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == c.Dir {
			return fs.SkipAll
		}
		if err != nil || d.IsDir() || !strings.HasSuffix(p, manifestSuffix) {
			return err
		}
		e, ok, err := c.entry(strings.TrimSuffix(p, manifestSuffix))
		if err != nil || !ok {
			return err
		}
		out = append(out, e)
		return nil
	})
	slices.SortFunc(out, func(a, b Entry) int {
		return strings.Compare(entryName(a)+"\x00"+a.Path, entryName(b)+"\x00"+b.Path)
	})
	return out, err
}

func entryName(e Entry) string {
	if e.Name != "" {
		return e.Name
	}
	return e.Ref.String()
}

// Remove deletes the files of r (every commit pulled by that name, for a branch or tag) with
// their manifests and any partial download, and the folders left empty. It returns the
// model files removed.
func (c Cache) Remove(r Ref) ([]string, error) {
	if r.Local() {
		return nil, fmt.Errorf("%s is a local file, not a cached model: delete it yourself", r.Path)
	}
	var files []string
	var commits []string
	if r.Pinned() {
		commits = []string{r.Revision}
	} else {
		entries, err := c.List()
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if e.Repo == r.Repo && e.File == r.File && e.Revision == r.Revision {
				commits = append(commits, e.Commit)
			}
		}
	}
	var errs []error
	for _, commit := range commits {
		p := c.FilePath(r.Repo, commit, r.File)
		if _, err := os.Stat(p); err == nil {
			files = append(files, p)
		}
		for _, f := range []string{p, p + manifestSuffix, p + partSuffix, p + lockSuffix} {
			if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		c.pruneEmpty(filepath.Dir(p))
	}
	return files, errors.Join(errs...)
}

// pruneEmpty removes dir and its parents up to the cache folder while they are empty.
func (c Cache) pruneEmpty(dir string) {
	root := filepath.Clean(c.Dir)
	for dir = filepath.Clean(dir); dir != root && strings.HasPrefix(dir, root+string(filepath.Separator)); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			return
		}
	}
}
