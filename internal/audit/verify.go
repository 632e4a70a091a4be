package audit

import (
	"bytes"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"strconv"
)

// Report is what Verify found in a trail that holds.
type Report struct {
	Files   int
	Records int // lines verified, start records included
	// Dropped is how many records the trail declares lost (its writer could not keep up, or
	// could not write): a gap it admits to, not tampering.
	Dropped int64
	Keyed   bool
	// Notes say what the files cannot prove, e.g. that the first begins after a file not given.
	Notes []string
}

// BadRecord is the first record of a trail that does not hold: its file, line (1-based) and
// number in the file (-1 when it has none), and why.
type BadRecord struct {
	File string
	Line int
	Seq  int64
	Why  string
}

func (b *BadRecord) Error() string {
	if b.Seq >= 0 {
		return fmt.Sprintf("%s:%d: record seq %d: %s", b.File, b.Line, b.Seq, b.Why)
	}
	return fmt.Sprintf("%s:%d: %s", b.File, b.Line, b.Why)
}

// header is what Verify reads of a record beyond its bytes.
type header struct {
	Seq          *int64 `json:"seq"`
	Type         string `json:"type"`
	Prev         string `json:"prev"`
	Hash         string `json:"hash"`
	Mac          string `json:"mac"`
	PreviousFile string `json:"previous_file"`
	Dropped      int64  `json:"dropped"`
}

// Verify checks the files of a trail, in the order given (oldest first, as Files lists them):
// each begins with a start record; every record's hash matches its bytes; each record's prev is
// the hash of the record before it and its seq the next number; each file's start record
// carries the hash of the last record of the file before it. The first record that breaks one
// of these is returned as a *BadRecord. key is the trail's HMAC key (ReadKey), nil for none.
//
// It proves that the records are the ones written, in the order written, none removed between
// the first and the last; it cannot tell records cut off the end of the newest file (nothing
// follows them) or a whole trail written again by someone who holds the key (or, without a
// key, by anyone).
func Verify(files []string, key []byte) (Report, error) {
	rep := Report{Keyed: key != nil}
	h := newHasher(key)
	var last string // the hash of the last record of the file before
	for i, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return rep, err
		}
		n, tail, err := verifyFile(file, data, h, key != nil, &rep)
		if err != nil {
			return rep, err
		}
		first := firstHeader(data)
		if i > 0 && first.Prev != last {
			return rep, &BadRecord{File: file, Line: 1, Seq: 0, Why: fmt.Sprintf("the file does not follow %s: its start record's prev is not the hash of that file's last record (a file between them is missing, or they are out of order)", files[i-1])}
		}
		if i == 0 && first.Prev != "" {
			prevFile := first.PreviousFile
			if prevFile == "" {
				prevFile = "an earlier file"
			}
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s begins after %s, not given here: name the files oldest first to check that join too", file, prevFile))
		}
		rep.Records += n
		rep.Files++
		last = tail
	}
	return rep, nil
}

// firstHeader is the header of data's first line (the checks of verifyFile have passed).
func firstHeader(data []byte) header {
	var hd header
	line, _, _ := bytes.Cut(data, []byte("\n"))
	_ = json.Unmarshal(line, &hd)
	return hd
}

// verifyFile checks one file and returns its number of records and the hash of its last.
func verifyFile(file string, data []byte, h hash.Hash, keyed bool, rep *Report) (int, string, error) {
	if len(data) == 0 {
		return 0, "", &BadRecord{File: file, Line: 1, Seq: -1, Why: "the file is empty: not even a start record"}
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	var prevHash string
	var prevSeq int64
	for i, raw := range lines {
		n := i + 1
		bad := func(seq int64, format string, a ...any) error {
			return &BadRecord{File: file, Line: n, Seq: seq, Why: fmt.Sprintf(format, a...)}
		}
		line, whole := bytes.CutSuffix(raw, []byte("\n"))
		body, ok := bodyOf(line)
		var hd header
		if !whole || !ok || json.Unmarshal(line, &hd) != nil || hd.Seq == nil {
			why := "not a complete audit record"
			if !whole {
				why += " (it has no newline: a write cut short, or the line was cut)"
			}
			return 0, "", bad(-1, "%s", why)
		}
		seq := *hd.Seq
		if n == 1 {
			if hd.Type != "start" || seq != 0 {
				return 0, "", bad(seq, "not a start record (type %q): the file's beginning is missing", hd.Type)
			}
			switch {
			case hd.Mac == "hmac-sha256" && !keyed:
				return 0, "", errors.New(file + ": the trail is keyed (hmac-sha256): verify it with its key (--key-file)")
			case hd.Mac != "hmac-sha256" && keyed:
				return 0, "", bad(seq, "the trail is not keyed (mac %q) but a key was given: the start record was changed, or the key is not this trail's", hd.Mac)
			}
		}
		if !hmac.Equal([]byte(sum(h, body)), []byte(hd.Hash)) {
			return 0, "", bad(seq, "its hash does not match its content: the record was edited")
		}
		if n > 1 {
			want := prevSeq + 1
			switch {
			case hd.Type == "start":
				return 0, "", bad(seq, "a start record in the middle of the file: records of another file were put here")
			case seq > want:
				if at := findSeq(lines[i+1:], want); at > 0 {
					return 0, "", bad(seq, "seq %d follows seq %d: records are out of order (seq %d is at line %d)", seq, prevSeq, want, n+at)
				}
				return 0, "", bad(seq, "seq %d follows seq %d: %d record%s before it %s missing (removed)", seq, prevSeq, seq-want, plural(seq-want), isAre(seq-want))
			case seq < want:
				return 0, "", bad(seq, "seq %d follows seq %d: records are out of order, or repeated", seq, prevSeq)
			case hd.Prev != prevHash:
				return 0, "", bad(seq, "its prev does not match the hash of line %d: that record was replaced, or this one moved", n-1)
			}
		}
		rep.Dropped += hd.Dropped
		prevHash, prevSeq = hd.Hash, seq
	}
	return len(lines), prevHash, nil
}

// findSeq is the position (1-based) among lines of the record numbered seq, 0 when none is.
func findSeq(lines [][]byte, seq int64) int {
	prefix := []byte(`{"seq":` + strconv.FormatInt(seq, 10) + `,`)
	for i, l := range lines {
		if bytes.HasPrefix(l, prefix) {
			return i + 1
		}
	}
	return 0
}

func plural(n int64) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func isAre(n int64) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

// ReadKey reads an HMAC key from file: its bytes, surrounding white space trimmed.
func ReadKey(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf, err := io.ReadAll(io.LimitReader(f, 4097))
	if err != nil {
		return nil, err
	}
	if len(buf) > 4096 {
		return nil, fmt.Errorf("%s: longer than 4096 bytes: not a key", file)
	}
	key := bytes.TrimSpace(buf)
	if len(key) < minKeyBytes {
		return nil, fmt.Errorf("%s: a key of %d bytes; it takes at least %d", file, len(key), minKeyBytes)
	}
	return key, nil
}
