package sqlite

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolmesh/toolmesh/mcpservers/internal/mcptesting"
)

// structured decodes the structured content of res into v, as a client
// that received it as JSON would.
func structured(t *testing.T, res *mcp.CallToolResult, v any) {
	t.Helper()
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
}

// TestToolsOverMCP uses the three tools through an mcp-go client session.
func TestToolsOverMCP(t *testing.T) {
	s := demoServer(t, Options{MaxRows: 5})
	c := mcptesting.InProcess(t, s.MCP())

	got := mcptesting.ToolNames(t, c)
	slices.Sort(got)
	if want := []string{"describe_table", "list_tables", "query_database"}; !slices.Equal(got, want) {
		t.Fatalf("tools = %v, want %v", got, want)
	}

	t.Run("list_tables", func(t *testing.T) {
		res := mcptesting.Call(t, c, "list_tables", map[string]any{})
		if res.IsError || !strings.Contains(mcptesting.Text(res), "employees: id, first_name") {
			t.Errorf("list_tables = %+v, want the tables with their columns", res)
		}
		var list TableList
		structured(t, res, &list)
		if len(list.Tables) != 3 || list.Tables[1].Name != "employees" {
			t.Errorf("structured tables = %+v, want departments, employees, salaries", list.Tables)
		}
	})

	t.Run("describe_table", func(t *testing.T) {
		res := mcptesting.Call(t, c, "describe_table", map[string]any{"table": "salaries"})
		if res.IsError || !strings.Contains(mcptesting.Text(res), "Table salaries: 30 rows.") {
			t.Errorf("describe_table = %q, want the salaries table", mcptesting.Text(res))
		}
		var d TableDescription
		structured(t, res, &d)
		if d.RowCount != 30 || !slices.Equal(d.PrimaryKey, []string{"employee_id"}) || len(d.ForeignKeys) != 1 {
			t.Errorf("structured description = %+v", d)
		}
	})

	tests := []struct {
		name      string
		tool      string
		args      map[string]any
		wantError bool
		wantText  []string
	}{
		{"query", "query_database", map[string]any{"sql": "SELECT d.name, AVG(s.annual_salary_usd) AS avg_salary FROM salaries s JOIN employees e ON e.id = s.employee_id JOIN departments d ON d.id = e.department_id WHERE d.name = 'Engineering' GROUP BY d.name"},
			false, []string{"1 row; columns: name, avg_salary", `{"name":"Engineering","avg_salary":125200}`}},
		{"truncated query", "query_database", map[string]any{"sql": "SELECT id FROM employees ORDER BY id"},
			false, []string{`{"id":5}`, "TRUNCATED after row 5"}},
		{"insert refused", "query_database", map[string]any{"sql": "INSERT INTO departments VALUES (9, 'Legal', 'Boston', 1)"},
			true, []string{"only read-only queries are allowed", "INSERT writes data"}},
		{"two statements refused", "query_database", map[string]any{"sql": "SELECT 1; DROP TABLE salaries"},
			true, []string{"only one statement per call"}},
		{"SQL error is a tool error", "query_database", map[string]any{"sql": "SELECT salary FROM employees"},
			true, []string{"no such column: salary"}},
		{"missing sql", "query_database", map[string]any{},
			true, []string{`missing required argument "sql"`}},
		{"unknown table", "describe_table", map[string]any{"table": "staff"},
			true, []string{`no table or view named "staff"`, "departments, employees, salaries"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := mcptesting.Call(t, c, tt.tool, tt.args)
			text := mcptesting.Text(res)
			if res.IsError != tt.wantError {
				t.Errorf("isError = %v, want %v; text %q", res.IsError, tt.wantError, text)
			}
			for _, w := range tt.wantText {
				if !strings.Contains(text, w) {
					t.Errorf("text %q does not contain %q", text, w)
				}
			}
		})
	}

	t.Run("structured query result", func(t *testing.T) {
		res := mcptesting.Call(t, c, "query_database", map[string]any{"sql": "SELECT id, first_name FROM employees ORDER BY id"})
		var r struct {
			Columns     []string
			Rows        [][]any
			RowCount    int `json:"row_count"`
			Truncated   bool
			TruncatedBy string `json:"truncated_by"`
		}
		structured(t, res, &r)
		if !slices.Equal(r.Columns, []string{"id", "first_name"}) || len(r.Rows) != 5 || r.RowCount != 5 ||
			!r.Truncated || r.TruncatedBy != TruncatedByRows {
			t.Errorf("structured = %+v, want 5 rows of id, first_name, truncated by max_rows", r)
		}
		if len(r.Rows) > 0 && (r.Rows[0][0] != 1.0 || r.Rows[0][1] != "Maya") {
			t.Errorf("first row = %v, want [1 Maya]", r.Rows[0])
		}
	})
}

// TestToolDefinitions checks what a retriever and a model see of the tools.
func TestToolDefinitions(t *testing.T) {
	s := demoServer(t, Options{})
	tools := s.MCP().ListTools()
	tests := []struct {
		tool     string
		required []string
		words    []string
	}{
		{"list_tables", nil, []string{"tables", "column names", "departments, employees, salaries"}},
		{"describe_table", []string{"table"}, []string{"each column with its type", "primary key", "foreign keys", "number of rows"}},
		{"query_database", []string{"sql"}, []string{"read-only", "SELECT", "count, sum, average", "At most 200 rows and 64 KiB", "5s",
			"employees(id, first_name, last_name, email, job_title, department_id, manager_id, hire_date)", "salaries(employee_id, annual_salary_usd, effective_date)"}},
	}
	for _, tt := range tests {
		st, ok := tools[tt.tool]
		if !ok {
			t.Errorf("tool %s missing", tt.tool)
			continue
		}
		tool := st.Tool
		if !slices.Equal(tool.InputSchema.Required, tt.required) {
			t.Errorf("%s required = %v, want %v", tt.tool, tool.InputSchema.Required, tt.required)
		}
		for _, w := range tt.words {
			if !strings.Contains(tool.Description, w) {
				t.Errorf("%s description does not contain %q: %s", tt.tool, w, tool.Description)
			}
		}
		if a := tool.Annotations; a.ReadOnlyHint == nil || !*a.ReadOnlyHint || a.DestructiveHint == nil || *a.DestructiveHint {
			t.Errorf("%s annotations = %+v, want read-only and not destructive", tt.tool, a)
		}
		if tool.OutputSchema.Type != "object" {
			t.Errorf("%s has no output schema", tt.tool)
		}
		for name, p := range tool.InputSchema.Properties {
			if d, _ := p.(map[string]any)["description"].(string); d == "" {
				t.Errorf("%s parameter %s has no description", tt.tool, name)
			}
		}
	}
}

func TestSchemaSummaryIsBounded(t *testing.T) {
	var list TableList
	for i := range 200 {
		list.Tables = append(list.Tables, Table{Name: strings.Repeat("t", 10) + string(rune('a'+i%26)), Columns: []string{"id", "value"}})
	}
	got := schemaSummary(&list)
	if len(got) > maxSchemaInDescription+50 || !strings.HasSuffix(got, "more, see list_tables.") {
		t.Errorf("summary of 200 tables is %d bytes and ends %q; want it bounded, pointing to list_tables", len(got), got[max(0, len(got)-40):])
	}
}
