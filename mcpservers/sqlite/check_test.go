package sqlite

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestCheckQueryAccepts(t *testing.T) {
	tests := []struct {
		name, sql, want string
	}{
		{"plain", "SELECT 1", "SELECT 1"},
		{"lower case", "select name from employees", "select name from employees"},
		{"trailing semicolon", "SELECT 1;", "SELECT 1"},
		{"semicolons and space", "  SELECT 1 ;; ; \n", "SELECT 1"},
		{"leading comments", "-- top earners\n/* note */ SELECT 1", "SELECT 1"},
		{"trailing line comment", "SELECT 1 -- done", "SELECT 1"},
		{"trailing comment after semicolon", "SELECT 1; -- DROP TABLE x", "SELECT 1"},
		{"unterminated block comment runs to the end", "SELECT 1 /* DROP TABLE x;", "SELECT 1"},
		{"semicolon in a string", "SELECT 'a;b' AS s", "SELECT 'a;b' AS s"},
		{"escaped quote in a string", "SELECT 'it''s; DROP TABLE x' AS s;", "SELECT 'it''s; DROP TABLE x' AS s"},
		{"semicolon in quoted identifiers", "SELECT \"a;\" , [b;], `c;` FROM t", "SELECT \"a;\" , [b;], `c;` FROM t"},
		{"comment markers in a string", "SELECT '--', '/*' FROM t", "SELECT '--', '/*' FROM t"},
		{"keywords in a string", "SELECT * FROM t WHERE note = 'DELETE FROM t'", "SELECT * FROM t WHERE note = 'DELETE FROM t'"},
		{"replace() is a function", "SELECT replace(name, 'a', 'b') FROM t", "SELECT replace(name, 'a', 'b') FROM t"},
		{"with select", "WITH e AS (SELECT * FROM employees) SELECT count(*) FROM e", "WITH e AS (SELECT * FROM employees) SELECT count(*) FROM e"},
		{"with recursive, columns, several CTEs", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT 5), d AS MATERIALIZED (SELECT x FROM c) SELECT * FROM d;",
			"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT 5), d AS MATERIALIZED (SELECT x FROM c) SELECT * FROM d"},
		{"with NOT MATERIALIZED and a quoted name", `WITH "my cte" AS NOT MATERIALIZED (SELECT 1) SELECT * FROM "my cte"`, `WITH "my cte" AS NOT MATERIALIZED (SELECT 1) SELECT * FROM "my cte"`},
		{"a CTE called recursive", "WITH recursive AS (SELECT 1) SELECT * FROM recursive", "WITH recursive AS (SELECT 1) SELECT * FROM recursive"},
		{"delete inside a CTE body is the engine's to refuse", "WITH d AS (SELECT 'DELETE') SELECT * FROM d", "WITH d AS (SELECT 'DELETE') SELECT * FROM d"},
		{"non-ASCII identifiers", "SELECT größe FROM maße", "SELECT größe FROM maße"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CheckQuery(tt.sql)
			if err != nil || got != tt.want {
				t.Errorf("CheckQuery(%q) = %q, %v; want %q, nil", tt.sql, got, err, tt.want)
			}
		})
	}
}

func TestCheckQueryRejects(t *testing.T) {
	tests := []struct {
		name, sql string
		want      []string // substrings of the error
	}{
		{"empty", "", []string{"no SQL statement"}},
		{"only comments and semicolons", "-- nothing\n;;", []string{"no SQL statement"}},
		{"insert", "INSERT INTO employees (id) VALUES (99)", []string{"only read-only", "INSERT writes data"}},
		{"update", "update salaries set annual_salary_usd = 1", []string{"UPDATE writes data"}},
		{"delete", "DELETE FROM employees", []string{"DELETE writes data"}},
		{"replace", "REPLACE INTO t VALUES (1)", []string{"REPLACE writes data"}},
		{"drop", "DROP TABLE employees", []string{"DROP changes the schema"}},
		{"create", "CREATE TABLE x (a)", []string{"CREATE changes the schema"}},
		{"alter", "ALTER TABLE employees ADD COLUMN x", []string{"ALTER changes the schema"}},
		{"attach", "ATTACH DATABASE '/tmp/x.db' AS x", []string{"ATTACH opens other database files"}},
		{"detach", "DETACH x", []string{"DETACH opens other database files"}},
		{"pragma write", "PRAGMA query_only = 0", []string{"PRAGMA", "describe_table"}},
		{"pragma read", "PRAGMA table_info(employees)", []string{"PRAGMA", "pragma_table_info"}},
		{"transaction", "BEGIN", []string{"BEGIN controls transactions"}},
		{"vacuum into", "VACUUM INTO '/tmp/copy.db'", []string{"VACUUM rewrites the database"}},
		{"explain", "EXPLAIN SELECT 1", []string{"EXPLAIN is not supported"}},
		{"show tables", "SHOW TABLES", []string{"SHOW is not SQLite", "list_tables"}},
		{"describe", "DESCRIBE employees", []string{"DESCRIBE is not SQLite", "describe_table"}},
		{"values", "VALUES (1)", []string{"only read-only", `starts with "VALUES"`}},
		{"leading comment hides nothing", "/* SELECT */ DELETE FROM employees", []string{"DELETE writes data"}},
		{"two statements", "SELECT 1; DROP TABLE employees", []string{"only one statement", "got 2", `"DROP"`}},
		{"two selects", "SELECT 1; SELECT 2;", []string{"only one statement"}},
		{"statement after a comment line", "SELECT 1; -- fine\nDELETE FROM employees", []string{"only one statement", `"DELETE"`}},
		{"with delete", "WITH x AS (SELECT 1) DELETE FROM employees", []string{"only read-only", "DELETE", "writes data", "must be followed by SELECT"}},
		{"with insert", "WITH RECURSIVE c(x) AS (SELECT 1) INSERT INTO t SELECT x FROM c", []string{"INSERT", "writes data"}},
		{"with update after two CTEs", "WITH a AS (SELECT 1), b AS (SELECT 2) UPDATE t SET x = 1", []string{"UPDATE", "writes data"}},
		{"with replace", "WITH a AS (SELECT 1) REPLACE INTO t SELECT * FROM a", []string{"REPLACE", "writes data"}},
		{"with nothing after", "WITH a AS (SELECT 1)", []string{"cannot read the WITH clause", "the end of the query"}},
		{"with without AS", "WITH a (SELECT 1) SELECT 1", []string{"cannot read the WITH clause", "expected AS"}},
		{"unterminated string", "SELECT 'abc", []string{"unterminated string literal"}},
		{"unterminated identifier", `SELECT "abc`, []string{"unterminated quoted identifier"}},
		{"unbalanced close", "SELECT 1) UNION SELECT (2", []string{"unbalanced parentheses"}},
		{"unbalanced open", "SELECT (1", []string{"unbalanced parentheses", "not closed"}},
		{"NUL byte", "SELECT 1\x00; DROP TABLE employees", []string{"NUL byte"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CheckQuery(tt.sql)
			if err == nil {
				t.Fatalf("CheckQuery(%q) = %q, nil; want an error", tt.sql, got)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("CheckQuery(%q) error = %q, want it to contain %q", tt.sql, err, w)
				}
			}
		})
	}
}

// FuzzCheckQuery checks what CheckQuery promises of anything it accepts: one
// statement, starting with SELECT or WITH, with no statement boundary left,
// that is accepted again as it is.
func FuzzCheckQuery(f *testing.F) {
	for _, s := range []string{
		"SELECT 1", "SELECT 'a;b'; ", "WITH a AS (SELECT 1) SELECT * FROM a", "WITH a AS (SELECT 1) DELETE FROM t",
		"SELECT 1; DROP TABLE t", "-- c\nSELECT [x;] FROM `y` /* z", "SELECT \"a\"\"b\" FROM t", "SELECT (1",
		"PRAGMA query_only=0", "select'';delete", "WITH RECURSIVE c(x) AS (SELECT 1) SELECT x FROM c",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		got, err := CheckQuery(sql)
		if err != nil {
			return
		}
		toks, terr := tokenize(got)
		if terr != nil || len(toks) == 0 {
			t.Fatalf("CheckQuery(%q) = %q, which does not tokenize: %v", sql, got, terr)
		}
		if !toks[0].is("SELECT") && !toks[0].is("WITH") {
			t.Fatalf("CheckQuery(%q) = %q, which starts with %q", sql, got, toks[0].text)
		}
		for _, tok := range toks {
			if tok.kind == tokSemicolon {
				t.Fatalf("CheckQuery(%q) = %q, which still has a ';' at %d", sql, got, tok.pos)
			}
		}
		if strings.Contains(got, "\x00") {
			t.Fatalf("CheckQuery(%q) = %q, which has a NUL byte", sql, got)
		}
		again, err := CheckQuery(got)
		if err != nil || again != got {
			t.Fatalf("CheckQuery(CheckQuery(%q)) = %q, %v; want %q", sql, again, err, got)
		}
	})
}
