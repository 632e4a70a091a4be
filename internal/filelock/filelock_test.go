package filelock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestLock: a held lock keeps a second taker waiting until it is released, or until the
// taker's context ends, when the error names the file and why it gave up.
func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pins.yaml.lock")
	unlock, err := Lock(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the lock file was not created: %v", err)
	}

	gaveUp := errors.New("waited long enough")
	ctx, cancel := context.WithTimeoutCause(context.Background(), 100*time.Millisecond, gaveUp)
	defer cancel()
	if _, err := Lock(ctx, path); !errors.Is(err, gaveUp) || !strings.Contains(err.Error(), path) {
		t.Errorf("a second Lock while held = %v, want an error naming %s and wrapping the context's cause", err, path)
	}

	got := make(chan error, 1)
	go func() {
		unlock2, err := Lock(context.Background(), path)
		if err == nil {
			unlock2()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("a second Lock returned (%v) while the first held the lock", err)
	case <-time.After(50 * time.Millisecond):
	}
	unlock()
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("the waiting Lock after the release: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting Lock did not get the lock once it was released")
	}
}

// TestLockUnwritable: a folder that cannot be written is the open error, wrapped, so a caller
// can tell a read-only mount (the pin file on a read-only volume) from a held lock.
func TestLockUnwritable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes a read-only folder")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o700)
	if _, err := Lock(context.Background(), filepath.Join(dir, "x.lock")); !errors.Is(err, os.ErrPermission) {
		t.Errorf("Lock in a read-only folder = %v, want an error wrapping os.ErrPermission", err)
	}
}
