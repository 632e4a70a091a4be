package audit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// rotatedStamp is the time a rotated file's name carries: UTC, fixed width, so that names sort
// in the order the files were written.
const rotatedStamp = "20060102T150405.000000000Z"

// rotatedName is the name the trail's file at path takes when it is moved aside at t:
// audit.jsonl becomes audit-20260102T150405.123456789Z.jsonl.
func rotatedName(path string, t time.Time) (string, error) {
	dir, base := filepath.Split(path)
	ext := filepath.Ext(base)
	stem := strings.TrimSuffix(base, ext)
	for i := range 1000 {
		name := filepath.Join(dir, stem+"-"+t.UTC().Add(time.Duration(i)).Format(rotatedStamp)+ext)
		if _, err := os.Lstat(name); errors.Is(err, os.ErrNotExist) {
			return name, nil
		}
	}
	return "", fmt.Errorf("no free name to rotate %s to", path)
}

func baseName(path string) string { return filepath.Base(path) }

// Files is the trail whose live file is path: its rotated files, oldest first, then path
// itself when it exists. Verify takes them in this order.
func Files(path string) ([]string, error) {
	dir, base := filepath.Split(path)
	ext := filepath.Ext(base)
	stem := strings.TrimSuffix(base, ext)
	if dir == "" {
		dir = "."
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		stamp, ok := strings.CutPrefix(name, stem+"-")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if stamp, ok = strings.CutSuffix(stamp, ext); !ok {
			continue
		}
		if _, err := time.Parse(rotatedStamp, stamp); err == nil {
			out = append(out, filepath.Join(filepath.Dir(path), name))
		}
	}
	slices.Sort(out)
	if _, err := os.Stat(path); err == nil {
		out = append(out, path)
	}
	return out, nil
}
