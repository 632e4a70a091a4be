// Package sqlite is the SQLite MCP server toolmesh ships. It serves one
// database file read-only through three tools: list_tables, describe_table
// and query_database. Without a file it serves a small demo database
// (departments, employees, salaries) built from an embedded SQL seed.
//
// Read-only holds by construction, in layers:
//  1. the engine: the file is opened with mode=ro and query_only, and an
//     authorizer lets statements read and do nothing else (openReadOnly);
//  2. the statement: CheckQuery accepts one SELECT (or WITH ... SELECT)
//     and says why it refuses anything else;
//  3. the result: at most Options.MaxRows rows and Options.MaxBytes bytes,
//     and the result says where it was cut;
//  4. the time: a query is interrupted after Options.QueryTimeout.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Name is the MCP server name.
const Name = "sqlite"

// Version is the server version reported in the MCP handshake.
const Version = "0.1.0"

// Defaults of Options.
const (
	DefaultMaxRows      = 200
	DefaultMaxBytes     = 64 << 10
	DefaultQueryTimeout = 5 * time.Second
)

// maxSchemaInDescription bounds the table list written into the
// query_database description, so a large schema does not crowd the prompt.
const maxSchemaInDescription = 1500

// Options configure a Server. Zero values mean the defaults.
type Options struct {
	// MaxRows is the most rows query_database returns.
	MaxRows int
	// MaxBytes is the most bytes of rows (as rendered in the text result)
	// query_database returns.
	MaxBytes int
	// QueryTimeout bounds each tool call's work on the database.
	QueryTimeout time.Duration
}

func (o Options) withDefaults() (Options, error) {
	if o.MaxRows < 0 || o.MaxBytes < 0 || o.QueryTimeout < 0 {
		return o, fmt.Errorf("sqlite options: limits must not be negative (rows %d, bytes %d, timeout %s)", o.MaxRows, o.MaxBytes, o.QueryTimeout)
	}
	if o.MaxRows == 0 {
		o.MaxRows = DefaultMaxRows
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.QueryTimeout == 0 {
		o.QueryTimeout = DefaultQueryTimeout
	}
	return o, nil
}

// Server serves one SQLite database read-only over MCP.
type Server struct {
	db      *sql.DB
	path    string
	opts    Options
	mcp     *server.MCPServer
	cleanup func() error // removes the demo database; nil for a user's file

	closeOnce sync.Once
	closeErr  error
}

// New opens the SQLite database at path read-only and returns its server.
// A missing file is an error: it is never created.
func New(path string, opts Options) (*Server, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	db, err := openReadOnly(path)
	if err != nil {
		return nil, err
	}
	s := &Server{db: db, path: path, opts: opts}
	ctx, cancel := context.WithTimeout(context.Background(), opts.QueryTimeout)
	defer cancel()
	tables, err := s.ListTables(ctx)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("sqlite database %s: %w", path, err)
	}
	s.mcp = s.newMCPServer(tables)
	return s, nil
}

// Path returns the database file served.
func (s *Server) Path() string { return s.path }

// MCP returns the MCP server. It is the same server on every call.
func (s *Server) MCP() *server.MCPServer { return s.mcp }

// Close closes the database and, for the demo database, removes its file.
// Later calls return the first call's result.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.closeErr = s.db.Close()
		if s.cleanup != nil {
			s.closeErr = errors.Join(s.closeErr, s.cleanup())
		}
	})
	return s.closeErr
}

func (s *Server) newMCPServer(tables *TableList) *server.MCPServer {
	m := server.NewMCPServer(Name, Version,
		server.WithToolCapabilities(false),
		server.WithRecovery(),
		server.WithInstructions("Read-only access to a SQLite database. Use list_tables and describe_table to learn the tables and columns, "+
			"then query_database with one SELECT to look up, count, sum or average the data."),
	)
	readOnly := []mcp.ToolOption{
		mcp.WithReadOnlyHintAnnotation(true),
		mcp.WithIdempotentHintAnnotation(true),
		mcp.WithOpenWorldHintAnnotation(false),
		mcp.WithDestructiveHintAnnotation(false),
	}
	names := make([]string, len(tables.Tables))
	for i, t := range tables.Tables {
		names[i] = t.Name
	}
	listDesc := "List the tables in the SQLite database with their column names. Call it first to find which table holds the data a question is about."
	tableExample := "employees"
	if len(names) > 0 {
		listDesc += " Tables: " + strings.Join(names, ", ") + "."
		tableExample = names[0]
	}
	queryDesc := fmt.Sprintf("Run one read-only SQL SELECT query on the SQLite database and get the result rows, one JSON object per row. "+
		"Use it to look up, filter, count, sum, average, group, join and sort records: let SQL do the arithmetic over many rows. "+
		"Only a single SELECT (or WITH ... SELECT) is allowed, no INSERT, UPDATE, DELETE or schema changes. "+
		"At most %d rows and %d KiB are returned, and a query is stopped after %s. SQLite syntax: strftime() for dates, || to join text.",
		s.opts.MaxRows, s.opts.MaxBytes/1024, s.opts.QueryTimeout)
	if schema := schemaSummary(tables); schema != "" {
		queryDesc += " Tables: " + schema
	}

	m.AddTools(
		server.ServerTool{
			Tool: mcp.NewTool("list_tables", append([]mcp.ToolOption{
				mcp.WithDescription(listDesc),
				mcp.WithTitleAnnotation("List database tables"),
				mcp.WithOutputSchema[TableList](),
			}, readOnly...)...),
			Handler: func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				list, err := s.ListTables(ctx)
				if err != nil {
					return mcp.NewToolResultError(err.Error()), nil
				}
				return mcp.NewToolResultStructured(list, list.Text()), nil
			},
		},
		server.ServerTool{
			Tool: mcp.NewTool("describe_table", append([]mcp.ToolOption{
				mcp.WithDescription("Describe one table of the SQLite database: each column with its type, the primary key, " +
					"the foreign keys that show how it joins to other tables, and the number of rows."),
				mcp.WithTitleAnnotation("Describe a database table"),
				mcp.WithString("table", mcp.Required(), mcp.MinLength(1),
					mcp.Description(fmt.Sprintf("Name of the table or view, as listed by list_tables, for example %q.", tableExample))),
				mcp.WithOutputSchema[TableDescription](),
			}, readOnly...)...),
			Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				table, err := req.RequireString("table")
				if err != nil {
					return mcp.NewToolResultError(`missing required argument "table": give a table name from list_tables`), nil
				}
				d, err := s.DescribeTable(ctx, table)
				if err != nil {
					return mcp.NewToolResultError(err.Error()), nil
				}
				return mcp.NewToolResultStructured(d, d.Text()), nil
			},
		},
		server.ServerTool{
			Tool: mcp.NewTool("query_database", append([]mcp.ToolOption{
				mcp.WithDescription(queryDesc),
				mcp.WithTitleAnnotation("Query the database (read-only SQL)"),
				mcp.WithString("sql", mcp.Required(), mcp.MinLength(1),
					mcp.Description("One SQLite SELECT statement, for example \"SELECT name, COUNT(*) AS n FROM t GROUP BY name ORDER BY n DESC\". "+
						"Use the table and column names from this tool's description or from list_tables.")),
				mcp.WithOutputSchema[QueryResult](),
			}, readOnly...)...),
			Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				q, err := req.RequireString("sql")
				if err != nil {
					return mcp.NewToolResultError(`missing required argument "sql": one SELECT statement`), nil
				}
				res, err := s.Query(ctx, q)
				if err != nil {
					return mcp.NewToolResultError(err.Error()), nil
				}
				return mcp.NewToolResultStructured(res, res.Text()), nil
			},
		},
	)
	return m
}

// schemaSummary writes the tables as "name(col, col); name(col)." for the
// query_database description: with the names in front of it a model can
// write the SQL without a list_tables call, and a retriever ranking tools
// by their words finds this tool for questions about employees or salaries.
// It is read once, when the server starts.
func schemaSummary(tables *TableList) string {
	var b strings.Builder
	for i, t := range tables.Tables {
		entry := t.Name + "(" + strings.Join(t.Columns, ", ") + ")"
		if b.Len()+len(entry) > maxSchemaInDescription {
			if i == 0 {
				fmt.Fprintf(&b, "%d tables, see list_tables", len(tables.Tables))
			} else {
				fmt.Fprintf(&b, "; and %d more, see list_tables", len(tables.Tables)-i)
			}
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(entry)
	}
	if b.Len() > 0 {
		b.WriteString(".")
	}
	return b.String()
}
