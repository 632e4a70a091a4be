package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// maxValueBytes caps every string or blob SQLite builds while running a
// query (SQLITE_LIMIT_LENGTH). The time limit cannot stop a single function
// call such as randomblob(1e9), so this bounds the memory one call can take;
// it is far above what a result can show (Options.MaxBytes).
const maxValueBytes = 16 << 20

// maxConns bounds the connections, and so the page caches, of one database.
const maxConns = 4

// readPragmas are the PRAGMAs the authorizer lets through: they only
// describe the schema. They are reached as table-valued functions, such as
// SELECT * FROM pragma_table_info('t'); PRAGMA statements are refused
// earlier by CheckQuery.
var readPragmas = map[string]bool{
	"table_info":       true,
	"table_xinfo":      true,
	"table_list":       true,
	"index_list":       true,
	"index_info":       true,
	"index_xinfo":      true,
	"foreign_key_list": true,
}

// openReadOnly opens the database file at path through the first read-only
// layer, the engine itself:
//   - mode=ro: SQLite opens the file read-only, fails instead of creating a
//     missing file, and every write fails with SQLITE_READONLY;
//   - _pragma=query_only(1): writes are refused even where mode=ro would not
//     apply (the temp database), should the file ever be opened writable;
//   - an authorizer that allows reading and nothing else, which also stops
//     what neither of the above does: ATTACH and VACUUM INTO create files,
//     even on a read-only connection.
func openReadOnly(path string) (*sql.DB, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite database %s: %w", path, err)
	}
	info, err := os.Stat(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("sqlite database %s does not exist (it is opened read-only and never created)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite database %s: %w", path, err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("sqlite database %s is not a regular file", path)
	}
	base, err := msqlite.NewConnector(fileURI(abs, "mode=ro&_pragma=query_only(1)"))
	if err != nil {
		return nil, fmt.Errorf("sqlite database %s: %w", path, err)
	}
	db := sql.OpenDB(readOnlyConnector{base})
	db.SetMaxOpenConns(maxConns)
	// Fail now, not on the first tool call, if the file is not a database.
	if _, err := db.Exec("SELECT count(*) FROM sqlite_schema"); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("sqlite database %s: %w", path, err)
	}
	return db, nil
}

// fileURI makes a SQLite "file:" URI for an absolute path: only a name that
// starts with "file:" has its mode parameter applied by SQLite, and the path
// must be escaped so that a '?' or '#' in it is not read as the query.
func fileURI(abs, query string) string {
	p := filepath.ToSlash(abs)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // a Windows drive letter: file:///C:/...
	}
	u := url.URL{Scheme: "file", Path: p, RawQuery: query}
	return u.String()
}

// readOnlyConnector installs the read-only authorizer on every connection
// as it is opened, before database/sql hands it to anyone. A connection
// hook on the driver would do the same for every sqlite user in the
// process, which is not ours to decide.
type readOnlyConnector struct {
	driver.Connector
}

func (c readOnlyConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	reg, ok := conn.(msqlite.AuthorizerRegisterer)
	if !ok {
		_ = conn.Close()
		return nil, fmt.Errorf("sqlite driver connection %T has no authorizer", conn)
	}
	if err := reg.RegisterAuthorizer(authorizeRead); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("install read-only authorizer: %w", err)
	}
	return conn, nil
}

// authorizeRead is the authorizer: SQLite asks it about every table read,
// function call, pragma and write while compiling a statement, and refuses
// the statement ("not authorized") when it says no.
func authorizeRead(action msqlite.AuthorizerActionCode, arg1, arg2, _, _ string) msqlite.AuthorizerReturnCode {
	switch action {
	case msqlite.AuthSelect, msqlite.AuthRead, msqlite.AuthRecursive:
		return msqlite.AuthorizerOK
	case msqlite.AuthFunction:
		if strings.EqualFold(arg2, "load_extension") {
			return msqlite.AuthorizerDeny
		}
		return msqlite.AuthorizerOK
	case msqlite.AuthPragma:
		if readPragmas[strings.ToLower(arg1)] {
			return msqlite.AuthorizerOK
		}
	}
	return msqlite.AuthorizerDeny
}

// limitValueSize applies maxValueBytes to the connection c.
func limitValueSize(c *sql.Conn) error {
	if _, err := msqlite.Limit(c, sqlite3.SQLITE_LIMIT_LENGTH, maxValueBytes); err != nil {
		return fmt.Errorf("limit value size: %w", err)
	}
	return nil
}

// quoteIdent quotes a table name for SQL text.
func quoteIdent(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}
