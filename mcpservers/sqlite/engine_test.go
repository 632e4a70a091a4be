package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	msqlite "modernc.org/sqlite"
)

// demoFile writes the demo database into a new temporary directory.
func demoFile(t *testing.T) (dir, path string) {
	t.Helper()
	dir = t.TempDir()
	path = filepath.Join(dir, DemoFileName)
	if err := WriteDemo(path); err != nil {
		t.Fatal(err)
	}
	return dir, path
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// writeAttempts are statements that would change the database or create
// files. The engine must refuse each one on its own, as if CheckQuery had
// been bypassed.
func writeAttempts(dir string) []struct{ name, sql string } {
	return []struct{ name, sql string }{
		{"insert", "INSERT INTO departments (id, name, location, budget_usd) VALUES (9, 'Legal', 'Boston', 1)"},
		{"update", "UPDATE salaries SET annual_salary_usd = annual_salary_usd * 2"},
		{"delete", "DELETE FROM employees"},
		{"replace", "REPLACE INTO departments VALUES (1, 'X', 'Y', 0)"},
		{"drop table", "DROP TABLE salaries"},
		{"create table", "CREATE TABLE extra (a)"},
		{"create temp table", "CREATE TEMP TABLE scratch (a)"},
		{"create index", "CREATE INDEX idx ON employees (last_name)"},
		{"alter table", "ALTER TABLE employees ADD COLUMN nickname TEXT"},
		{"attach creates no file", "ATTACH DATABASE '" + filepath.Join(dir, "attached.db") + "' AS other"},
		{"vacuum into creates no file", "VACUUM INTO '" + filepath.Join(dir, "copy.db") + "'"},
		{"vacuum", "VACUUM"},
		{"pragma query_only off", "PRAGMA query_only = 0"},
		{"pragma user_version", "PRAGMA user_version = 7"},
		{"pragma journal_mode", "PRAGMA journal_mode = WAL"},
		{"multiple statements", "SELECT 1; DELETE FROM employees"},
		{"with delete", "WITH x AS (SELECT 1) DELETE FROM employees"},
		{"begin immediate", "BEGIN IMMEDIATE"},
		{"load_extension", "SELECT load_extension('/tmp/evil.so')"},
	}
}

// TestEngineRefusesWrites runs write attempts straight on the read-only
// connection, without CheckQuery: each fails, and the file and its
// directory are unchanged.
func TestEngineRefusesWrites(t *testing.T) {
	dir, path := demoFile(t)
	before := fileSum(t, path)
	db, err := openReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	for _, tt := range writeAttempts(dir) {
		t.Run(tt.name, func(t *testing.T) {
			// Query, not Exec: the tools only ever query, and the driver
			// runs every statement of a multi-statement query.
			rows, err := db.QueryContext(ctx, tt.sql)
			if err == nil {
				for rows.Next() {
				}
				err = rows.Err()
				rows.Close()
			}
			if err == nil {
				t.Fatalf("%q succeeded on the read-only connection, want an error", tt.sql)
			}
			msg := err.Error()
			if !strings.Contains(msg, "authoriz") && !strings.Contains(msg, "readonly") {
				t.Errorf("%q error = %q, want the engine refusing it (authorization denied / readonly)", tt.sql, msg)
			}
		})
	}
	// PRAGMA query_only = 0 was refused; had it not been, this would be the
	// write it enables. It must still fail on the same connection.
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = conn.ExecContext(ctx, "PRAGMA query_only = 0")
	if _, err := conn.ExecContext(ctx, "INSERT INTO departments VALUES (9, 'Legal', 'Boston', 1)"); err == nil {
		t.Errorf("INSERT after PRAGMA query_only = 0 succeeded, want an error")
	}
	conn.Close()

	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM employees").Scan(&n); err != nil || n != 30 {
		t.Errorf("employees after the attempts = %d, %v; want 30", n, err)
	}
	db.Close()
	if got := fileSum(t, path); got != before {
		t.Errorf("the database file changed")
	}
	if got, want := dirNames(t, dir), []string{DemoFileName}; !slices.Equal(got, want) {
		t.Errorf("files next to the database = %v, want %v (nothing created)", got, want)
	}
}

// TestEngineLayersEachRefuseWrites shows that each engine guard holds alone:
// mode=ro, the query_only pragma, and the authorizer.
func TestEngineLayersEachRefuseWrites(t *testing.T) {
	layers := []struct {
		name, query string
		authorizer  bool
	}{
		{"mode=ro", "mode=ro", false},
		{"query_only", "mode=rw&_pragma=query_only(1)", false},
		{"authorizer", "mode=rw", true},
	}
	for _, l := range layers {
		t.Run(l.name, func(t *testing.T) {
			_, path := demoFile(t)
			before := fileSum(t, path)
			base, err := msqlite.NewConnector(fileURI(path, l.query))
			if err != nil {
				t.Fatal(err)
			}
			var db *sql.DB
			if l.authorizer {
				db = sql.OpenDB(readOnlyConnector{base})
			} else {
				db = sql.OpenDB(base)
			}
			defer db.Close()
			for _, stmt := range []string{
				"INSERT INTO departments VALUES (9, 'Legal', 'Boston', 1)",
				"UPDATE salaries SET annual_salary_usd = 0",
				"DELETE FROM employees",
				"DROP TABLE salaries",
			} {
				if _, err := db.Exec(stmt); err == nil {
					t.Errorf("%s alone: %q succeeded, want an error", l.name, stmt)
				}
			}
			db.Close()
			if fileSum(t, path) != before {
				t.Errorf("%s alone: the database file changed", l.name)
			}
		})
	}
}

func TestEngineAllowsReads(t *testing.T) {
	_, path := demoFile(t)
	db, err := openReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		"SELECT count(*) FROM employees",
		"SELECT count(*) FROM pragma_table_info('employees')",
		"SELECT count(*) FROM pragma_foreign_key_list('employees')",
		"SELECT count(*) FROM sqlite_schema",
		"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 3) SELECT count(*) FROM c",
		"SELECT count(*) FROM (SELECT upper(name), round(avg(budget_usd), 2) FROM departments GROUP BY name)",
	} {
		var n int
		if err := db.QueryRow(q).Scan(&n); err != nil || n == 0 {
			t.Errorf("%q = %d, %v; want a count", q, n, err)
		}
	}
}

func TestOpenMissingFileCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"missing.db", "with space?.db", "sub/dir.db"} {
		path := filepath.Join(dir, name)
		_, err := New(path, Options{})
		if err == nil || !strings.Contains(err.Error(), "does not exist") {
			t.Errorf("New(%q) error = %v, want one saying it does not exist", name, err)
		}
	}
	if got := dirNames(t, dir); len(got) != 0 {
		t.Errorf("New created %v, want nothing", got)
	}
	if _, err := New(dir, Options{}); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("New(a directory) error = %v, want not a regular file", err)
	}
	notDB := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notDB, []byte(strings.Repeat("not a database\n", 100)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(notDB, Options{}); err == nil || !strings.Contains(err.Error(), "not a database") {
		t.Errorf("New(a text file) error = %v, want not a database", err)
	}
}

func TestOpenPathNeedingEscapes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "my data #1?.db")
	if err := WriteDemo(path); err != nil {
		t.Fatal(err)
	}
	s, err := New(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, want := dirNames(t, dir), []string{"my data #1?.db"}; !slices.Equal(got, want) {
		t.Errorf("files = %v, want %v", got, want)
	}
}
