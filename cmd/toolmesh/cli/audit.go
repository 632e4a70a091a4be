package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/internal/audit"
)

const auditUsage = `Usage:
  toolmesh audit verify [--rotated] [--key-file K] [--json] FILE...
  toolmesh audit digest [--key-file K] 'JSON'

verify checks an audit trail (--audit.file): each file begins with its start record, every
record's hash matches its content, each record follows the one before it (its prev and seq)
and each file follows the one before it. Name the files oldest first; --rotated adds the
rotated files beside FILE. It exits 1 naming the first record that does not hold (edited,
removed, moved), 0 when the trail holds. It cannot tell records cut off the end of the newest
file, or a trail written again whole by someone who holds its key (without a key, by anyone):
keep a copy elsewhere (the OpenTelemetry log records), and see docs/operations/audit.md.

digest prints the digest a record's args_digest holds for these arguments (a JSON object), to
find the calls made with them.
`

func runAudit(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, auditUsage)
		return exitError{code: 2}
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "verify":
		return runAuditVerify(rest, stdout, stderr)
	case "digest":
		return runAuditDigest(rest, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, auditUsage)
		return nil
	default:
		return usageError("toolmesh audit: unknown command %q; choose verify or digest", cmd)
	}
}

func runAuditVerify(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("audit verify", stderr, auditUsage)
	rotated := fs.Bool("rotated", false, "verify FILE's rotated files too (FILE-TIME.EXT beside it), oldest first, and the joins between them")
	keyFile := fs.String("key-file", "", "the trail's key (--audit.key-file), for a keyed trail")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	files, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return usageError("toolmesh audit verify: name the trail's files, oldest first (see 'toolmesh audit verify -h')")
	}
	if *rotated {
		if len(files) != 1 {
			return usageError("toolmesh audit verify: --rotated takes one FILE, the live one")
		}
		if files, err = audit.Files(files[0]); err != nil {
			return err
		}
		if len(files) == 0 {
			return fmt.Errorf("no audit files at %s", args[len(args)-1])
		}
	}
	var key []byte
	if *keyFile != "" {
		if key, err = audit.ReadKey(*keyFile); err != nil {
			return fmt.Errorf("--key-file: %w", err)
		}
	}
	rep, err := audit.Verify(files, key)
	if err != nil {
		return exitError{code: 1, msg: "toolmesh audit verify: " + err.Error()}
	}
	if *asJSON {
		out, _ := json.MarshalIndent(map[string]any{"ok": true, "files": rep.Files, "records": rep.Records, "dropped": rep.Dropped,
			"keyed": rep.Keyed, "notes": rep.Notes}, "", "  ")
		fmt.Fprintln(stdout, string(out))
		return nil
	}
	mac := "sha256"
	if rep.Keyed {
		mac = "hmac-sha256"
	}
	fmt.Fprintf(stdout, "ok: %d records in %d file%s, the chain holds (%s)\n", rep.Records, rep.Files, plural(rep.Files), mac)
	if rep.Dropped > 0 {
		fmt.Fprintf(stdout, "note: the trail declares %d records it dropped (its writer could not keep up or could not write; see toolmesh.audit.records)\n", rep.Dropped)
	}
	for _, n := range rep.Notes {
		fmt.Fprintln(stdout, "note: "+n)
	}
	return nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func runAuditDigest(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("audit digest", stderr, auditUsage)
	keyFile := fs.String("key-file", "", "the trail's key (--audit.key-file), for a keyed trail")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError("toolmesh audit digest: give the arguments, one JSON object")
	}
	var s structpb.Struct
	if err := protojson.Unmarshal([]byte(strings.TrimSpace(pos[0])), &s); err != nil {
		return usageError("toolmesh audit digest: the arguments must be a JSON object: %v", err)
	}
	var key []byte
	if *keyFile != "" {
		if key, err = audit.ReadKey(*keyFile); err != nil {
			return fmt.Errorf("--key-file: %w", err)
		}
	}
	fmt.Fprintln(stdout, audit.Digest(&s, key))
	return nil
}
