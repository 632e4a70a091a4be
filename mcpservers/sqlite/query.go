package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Why query results are shown as one JSON object per row: a small model
// reading a table has to count separators to know which column a value is
// in, and gets it wrong on wide or ragged rows (values with spaces, '|' or
// newlines, NULLs). With {"column": value} every value carries its column
// name, strings are quoted so "NULL" and NULL or "12" and 12 differ, and
// numbers appear exactly as SQLite returned them, ready to be passed on to
// another tool. The repeated names cost some bytes, which the byte cap
// bounds.

// Values of QueryResult.TruncatedBy.
const (
	TruncatedByRows  = "max_rows"
	TruncatedByBytes = "max_bytes"
)

// QueryResult is the structured content of query_database.
type QueryResult struct {
	Columns []string `json:"columns" jsonschema:"the result column names, in order"`
	Rows    [][]any  `json:"rows" jsonschema:"the result rows; each row has one value per column (number, string or null)"`
	// RowCount is len(Rows), for readers of the JSON.
	RowCount int `json:"row_count" jsonschema:"the number of rows returned"`
	// Truncated is set when the query produced more than Rows.
	Truncated bool `json:"truncated" jsonschema:"true when the query produced more rows than were returned"`
	// TruncatedBy names the limit that cut the result: TruncatedByRows or
	// TruncatedByBytes; empty when nothing was cut.
	TruncatedBy string `json:"truncated_by,omitempty" jsonschema:"which limit cut the result: max_rows or max_bytes"`

	lines []string // the rows as JSON objects, for Text
	limit int      // the limit that cut the result, for Text
}

// Text renders the result for a model: a header line, then one JSON object
// per row, then a line saying where and why the result was cut, if it was.
func (r *QueryResult) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s; columns: %s\n", r.RowCount, plural(int64(r.RowCount), "row", "rows"), strings.Join(r.Columns, ", "))
	for _, l := range r.lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	switch r.TruncatedBy {
	case TruncatedByRows:
		fmt.Fprintf(&b, "TRUNCATED after row %d: the query returned more rows, but at most %d are shown. Narrow it with WHERE, aggregate with GROUP BY/COUNT/SUM/AVG, or page with LIMIT/OFFSET.\n", r.RowCount, r.limit)
	case TruncatedByBytes:
		if r.RowCount == 0 {
			fmt.Fprintf(&b, "TRUNCATED before the first row: one row is larger than the %d-byte result limit. Select fewer columns or shorten long values with substr().\n", r.limit)
		} else {
			fmt.Fprintf(&b, "TRUNCATED after row %d: the next row would pass the %d-byte result limit and the query returned more rows. Select fewer columns, shorten long values with substr(), or narrow the query.\n", r.RowCount, r.limit)
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Query runs one read-only SELECT through every layer: CheckQuery, the
// read-only connection, the row and byte caps and the time limit. Errors
// are meant to be shown to the model as they are.
func (s *Server) Query(ctx context.Context, query string) (*QueryResult, error) {
	stmt, err := CheckQuery(query)
	if err != nil {
		return nil, err
	}
	// The query is materialized, at most MaxRows+1 rows of it, before its
	// first row is returned. The driver interrupts a statement when its
	// context ends only while it computes the first row; later rows would
	// otherwise run unwatched, and a query whose second row never comes
	// (a recursive CTE filtered down to one row) would run forever.
	// The CTE name is unusual so it does not hide a table of the query.
	wrapped := fmt.Sprintf("WITH toolmesh_capped_result AS MATERIALIZED (SELECT * FROM (\n%s\n) LIMIT %d) SELECT * FROM toolmesh_capped_result",
		stmt, s.opts.MaxRows+1)

	qctx, cancel := context.WithTimeout(ctx, s.opts.QueryTimeout)
	defer cancel()
	conn, err := s.db.Conn(qctx)
	if err != nil {
		return nil, s.queryError(ctx, qctx, err)
	}
	defer conn.Close()
	if err := limitValueSize(conn); err != nil {
		return nil, err
	}
	rows, err := conn.QueryContext(qctx, wrapped)
	if err != nil {
		return nil, s.queryError(ctx, qctx, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, s.queryError(ctx, qctx, err)
	}
	res := &QueryResult{Columns: cols, Rows: [][]any{}}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	size := 0
	for rows.Next() {
		if len(res.Rows) == s.opts.MaxRows {
			res.Truncated, res.TruncatedBy, res.limit = true, TruncatedByRows, s.opts.MaxRows
			break
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, s.queryError(ctx, qctx, err)
		}
		row := make([]any, len(vals))
		for i, v := range vals {
			row[i] = jsonValue(v)
		}
		line := rowJSON(cols, row)
		if size+len(line)+1 > s.opts.MaxBytes {
			res.Truncated, res.TruncatedBy, res.limit = true, TruncatedByBytes, s.opts.MaxBytes
			break
		}
		size += len(line) + 1
		res.Rows = append(res.Rows, row)
		res.lines = append(res.lines, line)
	}
	if err := rows.Err(); err != nil {
		return nil, s.queryError(ctx, qctx, err)
	}
	res.RowCount = len(res.Rows)
	return res, nil
}

// queryError words an error of the engine for the model. qctx is ctx with
// the query's time limit.
func (s *Server) queryError(ctx, qctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("query canceled: %w", ctx.Err())
	}
	if errors.Is(qctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("query stopped: it ran longer than the %s time limit; make it cheaper (filter with WHERE, avoid unbounded recursive CTEs) and try again", s.opts.QueryTimeout)
	}
	msg := err.Error()
	if strings.Contains(msg, "string or blob too big") {
		return fmt.Errorf("query failed: %s (no single value may exceed %d bytes; shorten it with substr())", msg, maxValueBytes)
	}
	return fmt.Errorf("query failed: %s", msg)
}

// jsonValue turns a value scanned from SQLite into one JSON can carry and a
// model can read: blobs and times become strings, infinities too.
func jsonValue(v any) any {
	switch x := v.(type) {
	case []byte:
		if len(x) > 64 {
			return fmt.Sprintf("<blob of %d bytes, starts x'%s'>", len(x), hex.EncodeToString(x[:16]))
		}
		return "x'" + hex.EncodeToString(x) + "'"
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return strconv.FormatFloat(x, 'g', -1, 64)
		}
		return x
	case time.Time:
		return formatTime(x)
	}
	return v
}

// formatTime prints a time the way it is usually stored in SQLite. The
// driver turns text in DATE, DATETIME and TIMESTAMP columns into times.
func formatTime(t time.Time) string {
	if t.Location() != time.UTC {
		return t.Format(time.RFC3339Nano)
	}
	if t.Hour() == 0 && t.Minute() == 0 && t.Second() == 0 && t.Nanosecond() == 0 {
		return t.Format(time.DateOnly)
	}
	return t.Format("2006-01-02 15:04:05.999999999")
}

// rowJSON renders one row as a JSON object with keys in column order, which
// encoding/json would not keep for a map. HTML characters are not escaped:
// "R&D" reads better than "R\u0026D".
func rowJSON(cols []string, row []any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	b.WriteByte('{')
	for i, c := range cols {
		if i > 0 {
			b.WriteByte(',')
		}
		_ = enc.Encode(c) // strings and the values of jsonValue always encode
		b.Truncate(b.Len() - 1)
		b.WriteByte(':')
		_ = enc.Encode(row[i])
		b.Truncate(b.Len() - 1)
	}
	b.WriteByte('}')
	return b.String()
}

// Table is one entry of list_tables.
type Table struct {
	Name    string   `json:"name" jsonschema:"the table or view name"`
	Type    string   `json:"type" jsonschema:"table or view"`
	Columns []string `json:"columns" jsonschema:"the column names, in order"`
}

// TableList is the structured content of list_tables.
type TableList struct {
	Tables []Table `json:"tables" jsonschema:"the tables and views of the database, by name"`
}

// Text renders the list for a model, one table per line.
func (l *TableList) Text() string {
	if len(l.Tables) == 0 {
		return "The database has no tables."
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s:", len(l.Tables), plural(int64(len(l.Tables)), "table", "tables"))
	for _, t := range l.Tables {
		fmt.Fprintf(&b, "\n%s", t.Name)
		if t.Type != "table" {
			fmt.Fprintf(&b, " (%s)", t.Type)
		}
		fmt.Fprintf(&b, ": %s", strings.Join(t.Columns, ", "))
	}
	return b.String()
}

// ListTables lists the tables and views, without SQLite's own sqlite_*
// tables, with their column names.
func (s *Server) ListTables(ctx context.Context) (*TableList, error) {
	qctx, cancel := context.WithTimeout(ctx, s.opts.QueryTimeout)
	defer cancel()
	rows, err := s.db.QueryContext(qctx, `SELECT name, type FROM sqlite_schema
		WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite\_%' ESCAPE '\' ORDER BY name`)
	if err != nil {
		return nil, s.queryError(ctx, qctx, err)
	}
	list := &TableList{Tables: []Table{}}
	for rows.Next() {
		var t Table
		if err := rows.Scan(&t.Name, &t.Type); err != nil {
			rows.Close()
			return nil, s.queryError(ctx, qctx, err)
		}
		list.Tables = append(list.Tables, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, s.queryError(ctx, qctx, err)
	}
	for i := range list.Tables {
		cols, err := s.columns(qctx, list.Tables[i].Name)
		if err != nil {
			return nil, s.queryError(ctx, qctx, err)
		}
		list.Tables[i].Columns = make([]string, len(cols))
		for j, c := range cols {
			list.Tables[i].Columns[j] = c.Name
		}
	}
	return list, nil
}

// Column is one column in describe_table.
type Column struct {
	Name       string `json:"name"`
	Type       string `json:"type" jsonschema:"the declared type, e.g. INTEGER or TEXT; empty when none was declared"`
	NotNull    bool   `json:"not_null"`
	Default    string `json:"default,omitempty" jsonschema:"the default value as SQL text, if any"`
	PrimaryKey bool   `json:"primary_key"`
}

// ForeignKey is a column that refers to a row of another table.
type ForeignKey struct {
	Column    string `json:"column"`
	RefTable  string `json:"ref_table" jsonschema:"the table it refers to"`
	RefColumn string `json:"ref_column" jsonschema:"the column it refers to (the primary key when empty)"`
}

// TableDescription is the structured content of describe_table.
type TableDescription struct {
	Name        string       `json:"name"`
	Type        string       `json:"type" jsonschema:"table or view"`
	Columns     []Column     `json:"columns"`
	PrimaryKey  []string     `json:"primary_key" jsonschema:"the primary key columns, in key order; empty when none is declared"`
	ForeignKeys []ForeignKey `json:"foreign_keys" jsonschema:"columns that refer to other tables, which is how tables join"`
	RowCount    int64        `json:"row_count" jsonschema:"the number of rows"`
}

// Text renders the description for a model.
func (d *TableDescription) Text() string {
	var b strings.Builder
	kind := "Table"
	if d.Type == "view" {
		kind = "View"
	}
	fmt.Fprintf(&b, "%s %s: %d %s.\nColumns:", kind, d.Name, d.RowCount, plural(d.RowCount, "row", "rows"))
	refs := map[string]ForeignKey{}
	for _, fk := range d.ForeignKeys {
		refs[fk.Column] = fk
	}
	for _, c := range d.Columns {
		fmt.Fprintf(&b, "\n- %s", c.Name)
		if c.Type != "" {
			fmt.Fprintf(&b, " %s", c.Type)
		}
		if c.PrimaryKey {
			b.WriteString(", primary key")
		}
		if c.NotNull {
			b.WriteString(", not null")
		}
		if c.Default != "" {
			fmt.Fprintf(&b, ", default %s", c.Default)
		}
		if fk, ok := refs[c.Name]; ok {
			ref := fk.RefTable
			if fk.RefColumn != "" {
				ref += "." + fk.RefColumn
			}
			fmt.Fprintf(&b, ", references %s", ref)
		}
	}
	switch {
	case len(d.PrimaryKey) > 0:
		fmt.Fprintf(&b, "\nPrimary key: %s", strings.Join(d.PrimaryKey, ", "))
	case d.Type == "table":
		b.WriteString("\nPrimary key: none declared")
	}
	return b.String()
}

// DescribeTable describes the table or view called name (case-insensitive,
// quotes and a "main." prefix are tolerated): its columns, primary key,
// foreign keys and row count.
func (s *Server) DescribeTable(ctx context.Context, name string) (*TableDescription, error) {
	name = strings.Trim(strings.TrimSpace(name), "\"'`[]")
	if len(name) > 5 && strings.EqualFold(name[:5], "main.") {
		name = strings.Trim(name[5:], "\"'`[]")
	}
	if name == "" {
		return nil, errors.New(`missing argument "table": give a table name from list_tables`)
	}
	qctx, cancel := context.WithTimeout(ctx, s.opts.QueryTimeout)
	defer cancel()
	d := &TableDescription{Columns: []Column{}, PrimaryKey: []string{}, ForeignKeys: []ForeignKey{}}
	err := s.db.QueryRowContext(qctx, `SELECT name, type FROM sqlite_schema
		WHERE type IN ('table', 'view') AND name = ? COLLATE NOCASE`, name).Scan(&d.Name, &d.Type)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, s.unknownTable(ctx, name)
	}
	if err != nil {
		return nil, s.queryError(ctx, qctx, err)
	}
	cols, err := s.columns(qctx, d.Name)
	if err != nil {
		return nil, s.queryError(ctx, qctx, err)
	}
	// pk is the column's position in the primary key, from 1.
	keyPos := map[int]string{}
	for _, c := range cols {
		d.Columns = append(d.Columns, c.Column)
		if c.pk > 0 {
			keyPos[c.pk] = c.Name
		}
	}
	for i := 1; i <= len(keyPos); i++ {
		d.PrimaryKey = append(d.PrimaryKey, keyPos[i])
	}
	rows, err := s.db.QueryContext(qctx, `SELECT "from", "table", coalesce("to", '') FROM pragma_foreign_key_list(?) ORDER BY id, seq`, d.Name)
	if err != nil {
		return nil, s.queryError(ctx, qctx, err)
	}
	for rows.Next() {
		var fk ForeignKey
		if err := rows.Scan(&fk.Column, &fk.RefTable, &fk.RefColumn); err != nil {
			rows.Close()
			return nil, s.queryError(ctx, qctx, err)
		}
		d.ForeignKeys = append(d.ForeignKeys, fk)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, s.queryError(ctx, qctx, err)
	}
	// The name comes from sqlite_schema, so quoting it is all it needs.
	if err := s.db.QueryRowContext(qctx, "SELECT count(*) FROM "+quoteIdent(d.Name)).Scan(&d.RowCount); err != nil {
		return nil, s.queryError(ctx, qctx, err)
	}
	return d, nil
}

func (s *Server) unknownTable(ctx context.Context, name string) error {
	list, err := s.ListTables(ctx)
	if err != nil || len(list.Tables) == 0 {
		return fmt.Errorf("no table or view named %q", name)
	}
	names := make([]string, len(list.Tables))
	for i, t := range list.Tables {
		names[i] = t.Name
	}
	return fmt.Errorf("no table or view named %q; the tables are: %s", name, strings.Join(names, ", "))
}

type columnInfo struct {
	Column
	pk int
}

// columns reads the columns of table (an exact name from sqlite_schema).
func (s *Server) columns(ctx context.Context, table string) ([]columnInfo, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, type, "notnull", coalesce(dflt_value, ''), pk FROM pragma_table_info(?) ORDER BY cid`, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var cols []columnInfo
	for rows.Next() {
		var c columnInfo
		if err := rows.Scan(&c.Name, &c.Type, &c.NotNull, &c.Default, &c.pk); err != nil {
			return nil, err
		}
		c.PrimaryKey = c.pk > 0
		cols = append(cols, c)
	}
	return cols, rows.Err()
}
