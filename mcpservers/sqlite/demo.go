package sqlite

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, for writing the demo
)

// DemoSQL is the seed of the demo database: departments, employees and
// salaries of a small company.
//
//go:embed demo.sql
var DemoSQL string

// DemoFileName is the file name OpenDemo gives the demo database.
const DemoFileName = "demo.db"

// WriteDemo creates the demo database at path from DemoSQL. It refuses to
// touch a file that already exists.
func WriteDemo(path string) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("create demo database: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("create demo database: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(path)
		}
	}()
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("create demo database: %w", err)
	}
	// mode=rw: the (empty) file exists, and SQLite must not create another.
	db, err := sql.Open("sqlite", fileURI(abs, "mode=rw"))
	if err != nil {
		return fmt.Errorf("create demo database: %w", err)
	}
	_, err = db.ExecContext(context.Background(), DemoSQL)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("create demo database %s: %w", path, err)
	}
	return nil
}

// OpenDemo writes the demo database into a new temporary directory and
// serves it. Close removes the directory.
func OpenDemo(opts Options) (*Server, error) {
	dir, err := os.MkdirTemp("", "toolmesh-sqlite-demo-")
	if err != nil {
		return nil, fmt.Errorf("demo database: %w", err)
	}
	path := filepath.Join(dir, DemoFileName)
	if err := WriteDemo(path); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	s, err := New(path, opts)
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	s.cleanup = func() error { return os.RemoveAll(dir) }
	return s, nil
}
