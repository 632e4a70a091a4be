package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// demoServer serves a fresh demo database, closed when the test ends.
func demoServer(t *testing.T, opts Options) *Server {
	t.Helper()
	s, err := OpenDemo(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// series is a query of n rows (x from 1 to n) that needs no table.
func series(n int, cols string) string {
	return fmt.Sprintf("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < %d) SELECT %s FROM c", n, cols)
}

func TestQueryRejectsWithReasons(t *testing.T) {
	s := demoServer(t, Options{})
	tests := []struct{ sql, want string }{
		{"INSERT INTO departments VALUES (9, 'Legal', 'Boston', 1)", "INSERT writes data"},
		{"UPDATE salaries SET annual_salary_usd = 1", "UPDATE writes data"},
		{"DELETE FROM employees", "DELETE writes data"},
		{"DROP TABLE employees", "DROP changes the schema"},
		{"ATTACH DATABASE 'x.db' AS x", "ATTACH opens other database files"},
		{"PRAGMA query_only = 0", "PRAGMA reads or changes connection settings"},
		{"SELECT 1; DELETE FROM employees", "only one statement per call"},
		{"WITH x AS (SELECT 1) DELETE FROM employees", "this WITH clause leads into DELETE, which writes data"},
	}
	for _, tt := range tests {
		res, err := s.Query(context.Background(), tt.sql)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Query(%q) = %v, %v; want an error containing %q", tt.sql, res, err, tt.want)
		}
	}
	res, err := s.Query(context.Background(), "SELECT count(*) AS n FROM employees")
	if err != nil || !reflect.DeepEqual(res.Rows, [][]any{{int64(30)}}) {
		t.Errorf("employees after the attempts = %v, %v; want 30", res, err)
	}
}

func TestQueryRowCap(t *testing.T) {
	s := demoServer(t, Options{MaxRows: 10})
	tests := []struct {
		n             int
		wantRows      int
		wantTruncated bool
	}{
		{9, 9, false},
		{10, 10, false},
		{11, 10, true},
		{100000, 10, true},
	}
	for _, tt := range tests {
		res, err := s.Query(context.Background(), series(tt.n, "x"))
		if err != nil {
			t.Fatalf("series(%d): %v", tt.n, err)
		}
		if res.RowCount != tt.wantRows || len(res.Rows) != tt.wantRows || res.Truncated != tt.wantTruncated {
			t.Errorf("series(%d): %d rows (row_count %d), truncated %v; want %d rows, truncated %v",
				tt.n, len(res.Rows), res.RowCount, res.Truncated, tt.wantRows, tt.wantTruncated)
		}
		text := res.Text()
		if tt.wantTruncated {
			if res.TruncatedBy != TruncatedByRows || !strings.Contains(text, "TRUNCATED after row 10") || !strings.Contains(text, "at most 10 are shown") {
				t.Errorf("series(%d): truncated_by %q, text:\n%s\nwant max_rows and a TRUNCATED line naming row 10", tt.n, res.TruncatedBy, text)
			}
		} else if res.TruncatedBy != "" || strings.Contains(text, "TRUNCATED") {
			t.Errorf("series(%d): truncated_by %q, text:\n%s\nwant no truncation", tt.n, res.TruncatedBy, text)
		}
		if got := res.Rows[len(res.Rows)-1][0]; got != int64(tt.wantRows) {
			t.Errorf("series(%d): last row = %v, want %d (rows in order)", tt.n, got, tt.wantRows)
		}
	}
}

func TestQueryByteCap(t *testing.T) {
	s := demoServer(t, Options{MaxBytes: 1000})
	// Each row renders as {"v":"xxx…"} with 100 x: 108 bytes plus a newline.
	res, err := s.Query(context.Background(), series(50, "printf('%.*c', 100, 'x') AS v"))
	if err != nil {
		t.Fatal(err)
	}
	if res.RowCount != 9 || !res.Truncated || res.TruncatedBy != TruncatedByBytes {
		t.Errorf("rows %d, truncated %v by %q; want 9 rows cut by max_bytes", res.RowCount, res.Truncated, res.TruncatedBy)
	}
	size := 0
	for _, l := range res.lines {
		size += len(l) + 1
	}
	if size > 1000 {
		t.Errorf("rows take %d bytes, want at most 1000", size)
	}
	if text := res.Text(); !strings.Contains(text, "TRUNCATED after row 9") || !strings.Contains(text, "1000-byte result limit") {
		t.Errorf("text does not say where and why it was cut:\n%s", text)
	}

	// A first row bigger than the whole budget: no rows, and the reason.
	res, err = s.Query(context.Background(), "SELECT printf('%.*c', 5000, 'y') AS big")
	if err != nil {
		t.Fatal(err)
	}
	if res.RowCount != 0 || res.TruncatedBy != TruncatedByBytes || !strings.Contains(res.Text(), "TRUNCATED before the first row") {
		t.Errorf("one huge row: %d rows, truncated by %q, text %q; want none, cut by max_bytes before the first row", res.RowCount, res.TruncatedBy, res.Text())
	}
}

// TestQueryTimeLimit runs queries that would never end: each is interrupted
// at the time limit, also when only its second row never comes, and the
// server keeps working.
func TestQueryTimeLimit(t *testing.T) {
	const limit = 300 * time.Millisecond
	s := demoServer(t, Options{QueryTimeout: limit})
	endless := "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)"
	for _, q := range []string{
		endless + " SELECT count(*) FROM c",
		endless + " SELECT x FROM c WHERE x = 1 OR x < 0",
		endless + " SELECT x FROM c ORDER BY x DESC LIMIT 1",
		"SELECT count(*) FROM employees a, employees b, employees c, employees d, employees e, employees f, employees g",
	} {
		start := time.Now()
		res, err := s.Query(context.Background(), q)
		took := time.Since(start)
		if err == nil || !strings.Contains(err.Error(), "time limit") {
			t.Errorf("Query(%q) = %v, %v; want a time limit error", q, res, err)
		}
		if took > limit+2*time.Second {
			t.Errorf("Query(%q) took %s, want it stopped near %s", q, took, limit)
		}
	}
	res, err := s.Query(context.Background(), "SELECT count(*) FROM employees")
	if err != nil || res.Rows[0][0] != int64(30) {
		t.Errorf("a query after the interrupted ones = %v, %v; want 30", res, err)
	}
}

func TestQueryCanceled(t *testing.T) {
	s := demoServer(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Query(ctx, "SELECT 1"); err == nil || !errors.Is(err, context.Canceled) {
		t.Errorf("Query with a canceled context = %v, want context.Canceled", err)
	}
}

func TestQueryValues(t *testing.T) {
	s := demoServer(t, Options{})
	res, err := s.Query(context.Background(),
		"SELECT 42 AS i, 2.5 AS f, 'R&D <ok>' AS s, NULL AS n, x'00ff' AS b, zeroblob(100) AS big, 1e999 AS inf, 1 AS i, date('2024-02-29') AS d")
	if err != nil {
		t.Fatal(err)
	}
	wantCols := []string{"i", "f", "s", "n", "b", "big", "inf", "i:1", "d"}
	if !reflect.DeepEqual(res.Columns, wantCols) {
		t.Errorf("columns = %v, want %v", res.Columns, wantCols)
	}
	wantRow := []any{int64(42), 2.5, "R&D <ok>", nil, "x'00ff'", "<blob of 100 bytes, starts x'00000000000000000000000000000000'>", "+Inf", int64(1), "2024-02-29"}
	if !reflect.DeepEqual(res.Rows, [][]any{wantRow}) {
		t.Errorf("rows = %#v, want %#v", res.Rows, [][]any{wantRow})
	}
	wantText := "1 row; columns: i, f, s, n, b, big, inf, i:1, d\n" +
		`{"i":42,"f":2.5,"s":"R&D <ok>","n":null,"b":"x'00ff'","big":"<blob of 100 bytes, starts x'00000000000000000000000000000000'>","inf":"+Inf","i:1":1,"d":"2024-02-29"}`
	if got := res.Text(); got != wantText {
		t.Errorf("text =\n%s\nwant\n%s", got, wantText)
	}

	res, err = s.Query(context.Background(), "SELECT name FROM departments WHERE 0")
	if err != nil || res.RowCount != 0 || res.Rows == nil || res.Text() != "0 rows; columns: name" {
		t.Errorf("empty result = %+v, %v; want 0 rows, non-nil Rows, text %q", res, err, "0 rows; columns: name")
	}
}

func TestQueryErrors(t *testing.T) {
	s := demoServer(t, Options{})
	tests := []struct{ sql, want string }{
		{"SELECT salary FROM employees", "query failed: SQL logic error: no such column: salary"},
		{"SELECT * FROM staff", "no such table: staff"},
		{"SELECT FROM", "syntax error"},
		{"SELECT length(randomblob(20000000))", "too big"},
		{"SELECT * FROM pragma_user_version", "not authorized"},
	}
	for _, tt := range tests {
		if _, err := s.Query(context.Background(), tt.sql); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Query(%q) error = %v, want one containing %q", tt.sql, err, tt.want)
		}
	}
}

func TestListTables(t *testing.T) {
	s := demoServer(t, Options{})
	list, err := s.ListTables(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []Table{
		{"departments", "table", []string{"id", "name", "location", "budget_usd"}},
		{"employees", "table", []string{"id", "first_name", "last_name", "email", "job_title", "department_id", "manager_id", "hire_date"}},
		{"salaries", "table", []string{"employee_id", "annual_salary_usd", "effective_date"}},
	}
	if !reflect.DeepEqual(list.Tables, want) {
		t.Errorf("tables = %+v, want %+v", list.Tables, want)
	}
	if got := list.Text(); !strings.HasPrefix(got, "3 tables:\ndepartments: id, name, location, budget_usd\n") {
		t.Errorf("text = %q", got)
	}
}

func TestDescribeTable(t *testing.T) {
	s := demoServer(t, Options{})
	for _, name := range []string{"employees", "EMPLOYEES", `"employees"`, " main.employees "} {
		d, err := s.DescribeTable(context.Background(), name)
		if err != nil {
			t.Fatalf("DescribeTable(%q): %v", name, err)
		}
		if d.Name != "employees" || d.Type != "table" || d.RowCount != 30 || len(d.Columns) != 8 {
			t.Errorf("DescribeTable(%q) = %s %s, %d rows, %d columns; want table employees, 30 rows, 8 columns", name, d.Type, d.Name, d.RowCount, len(d.Columns))
		}
		if !reflect.DeepEqual(d.PrimaryKey, []string{"id"}) {
			t.Errorf("primary key = %v, want [id]", d.PrimaryKey)
		}
		wantFK := []ForeignKey{{"manager_id", "employees", "id"}, {"department_id", "departments", "id"}}
		if !reflect.DeepEqual(d.ForeignKeys, wantFK) {
			t.Errorf("foreign keys = %+v, want %+v", d.ForeignKeys, wantFK)
		}
		if got, want := d.Columns[5], (Column{Name: "department_id", Type: "INTEGER", NotNull: true}); got != want {
			t.Errorf("column 5 = %+v, want %+v", got, want)
		}
	}
	d, err := s.DescribeTable(context.Background(), "salaries")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Table salaries: 30 rows.", "- employee_id INTEGER, primary key, references employees.id", "- annual_salary_usd INTEGER, not null", "Primary key: employee_id"} {
		if !strings.Contains(d.Text(), want) {
			t.Errorf("text does not contain %q:\n%s", want, d.Text())
		}
	}
	if _, err := s.DescribeTable(context.Background(), "staff"); err == nil ||
		!strings.Contains(err.Error(), `no table or view named "staff"; the tables are: departments, employees, salaries`) {
		t.Errorf("DescribeTable(staff) error = %v, want one listing the tables", err)
	}
	if _, err := s.DescribeTable(context.Background(), "  "); err == nil {
		t.Errorf("DescribeTable(blank) = nil error, want one")
	}
}

func TestOptions(t *testing.T) {
	s := demoServer(t, Options{})
	if got, want := s.opts, (Options{MaxRows: DefaultMaxRows, MaxBytes: DefaultMaxBytes, QueryTimeout: DefaultQueryTimeout}); got != want {
		t.Errorf("default options = %+v, want %+v", got, want)
	}
	if _, err := OpenDemo(Options{MaxRows: -1}); err == nil {
		t.Errorf("OpenDemo with MaxRows -1 = nil error, want one")
	}
}

func TestDemoLifecycle(t *testing.T) {
	s, err := OpenDemo(Options{})
	if err != nil {
		t.Fatal(err)
	}
	path := s.Path()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("demo database %s: %v", path, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("demo database after Close: %v, want it removed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	if err := WriteDemo(path); err == nil {
		defer os.Remove(path)
	}
	if err := WriteDemo(path); err == nil {
		t.Errorf("WriteDemo over an existing file = nil error, want one")
	}
}

// TestDemoQuestions checks that the demo answers the questions it is for
// with plausible numbers.
func TestDemoQuestions(t *testing.T) {
	s := demoServer(t, Options{})
	const engineering = `FROM salaries s JOIN employees e ON e.id = s.employee_id
		JOIN departments d ON d.id = e.department_id WHERE d.name = 'Engineering'`
	tests := []struct {
		question, sql string
		want          [][]any
	}{
		{"average salary in Engineering", "SELECT AVG(s.annual_salary_usd) AS avg_salary " + engineering,
			[][]any{{125200.0}}},
		{"cost of a 12% raise for Engineering", "SELECT SUM(s.annual_salary_usd) * 0.12 AS raise_cost " + engineering,
			[][]any{{150240.0}}},
		{"average after a 12% raise", "SELECT ROUND(AVG(s.annual_salary_usd) * 1.12) AS new_avg " + engineering,
			[][]any{{140224.0}}},
		{"headcount per department", `SELECT d.name, COUNT(*) AS n FROM employees e JOIN departments d ON d.id = e.department_id
			GROUP BY d.name ORDER BY n DESC, d.name`,
			[][]any{{"Engineering", int64(10)}, {"Sales", int64(7)}, {"Marketing", int64(5)}, {"Finance", int64(4)}, {"Human Resources", int64(4)}}},
		{"best paid employee", `SELECT e.first_name || ' ' || e.last_name AS name, s.annual_salary_usd FROM employees e
			JOIN salaries s ON s.employee_id = e.id ORDER BY s.annual_salary_usd DESC LIMIT 1`,
			[][]any{{"Maya Chen", int64(165000)}}},
		{"total payroll and budget share", `SELECT SUM(s.annual_salary_usd) AS payroll,
			ROUND(100.0 * SUM(s.annual_salary_usd) / (SELECT SUM(budget_usd) FROM departments), 1) AS pct_of_budget FROM salaries s`,
			[][]any{{int64(3107000), 53.6}}},
		{"who reports to the Engineering Manager", `SELECT COUNT(*) FROM employees WHERE manager_id =
			(SELECT id FROM employees WHERE job_title = 'Engineering Manager')`,
			[][]any{{int64(8)}}},
		{"hired since 2022", "SELECT COUNT(*) AS hires FROM employees WHERE hire_date >= '2022-01-01'",
			[][]any{{int64(7)}}},
		{"an apostrophe in a name", "SELECT email FROM employees WHERE last_name = 'O''Connor'",
			[][]any{{"james.oconnor@example.com"}}},
	}
	for _, tt := range tests {
		t.Run(tt.question, func(t *testing.T) {
			res, err := s.Query(context.Background(), tt.sql)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(res.Rows, tt.want) {
				t.Errorf("rows = %#v, want %#v", res.Rows, tt.want)
			}
		})
	}
}
