package sqlite

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// CheckQuery is the second read-only layer: it accepts exactly one SELECT
// statement (optionally introduced by WITH) and returns it without the
// comments and semicolons around it, ready to be run as a subquery. Anything
// else is an error that says why, worded for the model that sent it.
//
// It reads SQL the way SQLite's tokenizer does (strings, quoted identifiers,
// comments) so that a ';' or a keyword inside a literal is not mistaken for
// a statement boundary. It is not the only guard: the connection itself is
// read-only, so a statement this check wrongly let through still cannot write.
func CheckQuery(sql string) (string, error) {
	if strings.IndexByte(sql, 0) >= 0 {
		// SQLite stops reading at a NUL byte, so what it runs would differ
		// from what was checked.
		return "", errors.New("the SQL contains a NUL byte; send plain text")
	}
	toks, err := tokenize(sql)
	if err != nil {
		return "", err
	}
	// Split into statements at top-level semicolons; empty statements
	// (";;", a trailing ";") are fine, a second real one is not.
	var stmts [][]token
	var cur []token
	for _, t := range toks {
		if t.kind == tokSemicolon {
			if len(cur) > 0 {
				stmts = append(stmts, cur)
			}
			cur = nil
			continue
		}
		cur = append(cur, t)
	}
	if len(cur) > 0 {
		stmts = append(stmts, cur)
	}
	switch {
	case len(stmts) == 0:
		return "", errors.New("no SQL statement given: send one SELECT query")
	case len(stmts) > 1:
		return "", fmt.Errorf("only one statement per call is allowed, got %d (the second starts with %q); send a single SELECT", len(stmts), stmts[1][0].text)
	}
	stmt := stmts[0]
	if err := checkParens(stmt); err != nil {
		return "", err
	}
	first := stmt[0]
	switch {
	case first.is("SELECT"):
	case first.is("WITH"):
		if err := checkWith(stmt); err != nil {
			return "", err
		}
	default:
		return "", notSelect(first.text)
	}
	last := stmt[len(stmt)-1]
	return sql[first.pos : last.pos+len(last.text)], nil
}

// notSelect explains why a statement that does not start with SELECT or
// WITH is refused.
func notSelect(keyword string) error {
	const only = "only read-only queries are allowed (one SELECT, or WITH ... SELECT)"
	why := ""
	switch strings.ToUpper(keyword) {
	case "INSERT", "REPLACE", "UPDATE", "DELETE", "UPSERT":
		why = "writes data, and this database is read-only"
	case "CREATE", "DROP", "ALTER":
		why = "changes the schema, and this database is read-only"
	case "ATTACH", "DETACH":
		why = "opens other database files, which is not allowed"
	case "PRAGMA":
		why = "reads or changes connection settings; use the list_tables and describe_table tools, or SELECT from pragma_table_info('table')"
	case "BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE":
		why = "controls transactions, which a read-only query does not need"
	case "VACUUM", "REINDEX", "ANALYZE":
		why = "rewrites the database file, and this database is read-only"
	case "EXPLAIN":
		why = "is not supported here"
	case "SHOW", "DESCRIBE", "DESC":
		why = "is not SQLite; use the list_tables and describe_table tools to see tables and columns"
	default:
		return fmt.Errorf("%s: the statement starts with %q", only, keyword)
	}
	return fmt.Errorf("%s: %s %s", only, strings.ToUpper(keyword), why)
}

// checkWith makes sure the statement a WITH clause introduces is a SELECT.
// SQLite also allows WITH ... INSERT/UPDATE/DELETE, which write.
//
//	WITH [RECURSIVE] name [(cols)] AS [NOT] [MATERIALIZED] (body) [, ...] SELECT ...
func checkWith(stmt []token) error {
	i := 1
	at := func() token {
		if i < len(stmt) {
			return stmt[i]
		}
		return token{kind: tokEnd, text: "the end of the query"}
	}
	malformed := func(want string) error {
		return fmt.Errorf("cannot read the WITH clause: expected %s, found %q; write WITH name AS (SELECT ...) SELECT ...", want, at().text)
	}
	// RECURSIVE is a keyword unless it is the table name itself.
	if at().is("RECURSIVE") && i+1 < len(stmt) && !stmt[i+1].is("AS") && stmt[i+1].kind != tokOpen {
		i++
	}
	for {
		if k := at().kind; k != tokWord && k != tokQuoted {
			return malformed("a name for the common table expression")
		}
		i++
		if at().kind == tokOpen {
			i = skipGroup(stmt, i)
		}
		if !at().is("AS") {
			return malformed("AS")
		}
		i++
		if at().is("NOT") {
			i++
		}
		if at().is("MATERIALIZED") {
			i++
		}
		if at().kind != tokOpen {
			return malformed("a parenthesized SELECT after AS")
		}
		i = skipGroup(stmt, i)
		if at().kind != tokComma {
			break
		}
		i++
	}
	main := at()
	if main.is("SELECT") {
		return nil
	}
	switch strings.ToUpper(main.text) {
	case "INSERT", "REPLACE", "UPDATE", "DELETE":
		return fmt.Errorf("only read-only queries are allowed: this WITH clause leads into %s, which writes data, and this database is read-only; a WITH clause must be followed by SELECT", strings.ToUpper(main.text))
	}
	return malformed("SELECT after the WITH clause")
}

// skipGroup returns the index just past the parenthesized group opening at
// stmt[i]. checkParens has made sure the group is closed.
func skipGroup(stmt []token, i int) int {
	depth := 0
	for ; i < len(stmt); i++ {
		switch stmt[i].kind {
		case tokOpen:
			depth++
		case tokClose:
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return i
}

// checkParens rejects unbalanced parentheses: the checked statement is run
// inside parentheses, so a stray ")" could otherwise step out of them.
func checkParens(stmt []token) error {
	depth := 0
	for _, t := range stmt {
		switch t.kind {
		case tokOpen:
			depth++
		case tokClose:
			depth--
			if depth < 0 {
				return fmt.Errorf("unbalanced parentheses: a ')' at offset %d closes nothing", t.pos)
			}
		}
	}
	if depth > 0 {
		return fmt.Errorf("unbalanced parentheses: %d '(' not closed", depth)
	}
	return nil
}

type tokenKind int

const (
	tokWord      tokenKind = iota // keyword or bare identifier
	tokQuoted                     // "ident", [ident], `ident`
	tokString                     // 'text'
	tokSemicolon                  // ;
	tokOpen                       // (
	tokClose                      // )
	tokComma                      // ,
	tokOther                      // numbers, operators, parameters
	tokEnd                        // past the last token (checkWith only)
)

type token struct {
	kind tokenKind
	text string
	pos  int // byte offset in the SQL
}

// is reports whether t is the keyword kw (upper case).
func (t token) is(kw string) bool {
	return t.kind == tokWord && strings.EqualFold(t.text, kw)
}

// tokenize splits sql into tokens, dropping whitespace and comments. Like
// SQLite, an unterminated block comment runs to the end; an unterminated
// string or quoted identifier is an error.
func tokenize(sql string) ([]token, error) {
	var toks []token
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			end := strings.IndexByte(sql[i:], '\n')
			if end < 0 {
				return toks, nil
			}
			i += end + 1
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			end := strings.Index(sql[i+2:], "*/")
			if end < 0 {
				return toks, nil
			}
			i += 2 + end + 2
		case c == '\'' || c == '"' || c == '`' || c == '[':
			closer := c
			if c == '[' {
				closer = ']'
			}
			end, ok := quoteEnd(sql, i+1, closer)
			if !ok {
				what := "quoted identifier"
				if c == '\'' {
					what = "string literal"
				}
				return nil, fmt.Errorf("unterminated %s starting at offset %d", what, i)
			}
			kind := tokQuoted
			if c == '\'' {
				kind = tokString
			}
			toks = append(toks, token{kind: kind, text: sql[i:end], pos: i})
			i = end
		case c == ';':
			toks = append(toks, token{kind: tokSemicolon, text: ";", pos: i})
			i++
		case c == '(':
			toks = append(toks, token{kind: tokOpen, text: "(", pos: i})
			i++
		case c == ')':
			toks = append(toks, token{kind: tokClose, text: ")", pos: i})
			i++
		case c == ',':
			toks = append(toks, token{kind: tokComma, text: ",", pos: i})
			i++
		case isWordByte(c):
			j := i
			for j < len(sql) && (isWordByte(sql[j]) || (sql[j] >= '0' && sql[j] <= '9')) {
				j++
			}
			toks = append(toks, token{kind: tokWord, text: sql[i:j], pos: i})
			i = j
		default:
			// Numbers, operators and parameters: their exact extent does
			// not matter to the check, one character at a time will do.
			_, size := utf8.DecodeRuneInString(sql[i:])
			toks = append(toks, token{kind: tokOther, text: sql[i : i+size], pos: i})
			i += size
		}
	}
	return toks, nil
}

// quoteEnd returns the index just past the closing quote of a literal whose
// content starts at i. A quote character written twice stands for itself;
// ']' has no such escape, as in SQLite.
func quoteEnd(sql string, i int, closer byte) (int, bool) {
	for i < len(sql) {
		if sql[i] != closer {
			i++
			continue
		}
		if closer != ']' && i+1 < len(sql) && sql[i+1] == closer {
			i += 2
			continue
		}
		return i + 1, true
	}
	return 0, false
}

// isWordByte reports whether c belongs to an identifier or keyword: letters,
// '_' and any byte of a non-ASCII character, as in SQLite. ('$' inside a
// name becomes a separate token here, which the check does not mind.)
func isWordByte(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80
}
