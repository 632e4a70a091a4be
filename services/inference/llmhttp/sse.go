package llmhttp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// MaxEventBytes bounds one server-sent event (one line of it, as read).
const MaxEventBytes = 16 << 20

// ErrEventTooLarge is returned by SSEReader.Next for an event over 16 MiB.
var ErrEventTooLarge = fmt.Errorf("stream event larger than %d bytes", MaxEventBytes)

// SSEReader reads server-sent events (https://html.spec.whatwg.org/multipage/server-sent-events.html):
// `field: value` lines, an event ends at a blank line, lines starting with ':' are comments
// (llama-server's pings). Both backends read their streams with it: llama's /completion and the
// OpenAI-compatible /v1/chat/completions of package chat.
type SSEReader struct {
	r      *bufio.Reader
	onLine func()
}

// NewSSEReader reads events from r; onLine, if not nil, is called for every line read (to
// reset an idle timer).
func NewSSEReader(r io.Reader, onLine func()) *SSEReader {
	if onLine == nil {
		onLine = func() {}
	}
	// Events are small; a longer line is read in pieces (see line), so a small buffer does.
	return &SSEReader{r: bufio.NewReaderSize(r, 4<<10), onLine: onLine}
}

// Next returns the next event's data, or the value of llama-server's old non-standard
// `error:` field (before PR #16109). At the end of the stream it returns io.EOF; an event
// whose blank line is missing at the end is still returned.
func (s *SSEReader) Next() (data, errField []byte, err error) {
	var buf []byte
	has := false
	for {
		line, err := s.line()
		if err != nil {
			if errors.Is(err, io.EOF) && (has || errField != nil) {
				// The last event lost its blank line: use it anyway.
				return buf, errField, nil
			}
			return nil, nil, err
		}
		s.onLine()
		if len(line) == 0 {
			if errField != nil || has {
				return buf, errField, nil
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(name) {
		case "data":
			if has {
				buf = append(buf, '\n')
			}
			buf = append(buf, value...)
			has = true
		case "error":
			errField = append(errField[:0], value...)
		}
	}
}

// line reads one line without its line ending (\n, \r\n or \r\n-less at EOF).
func (s *SSEReader) line() ([]byte, error) {
	var out []byte
	for {
		frag, err := s.r.ReadSlice('\n')
		if len(out)+len(frag) > MaxEventBytes {
			return nil, ErrEventTooLarge
		}
		out = append(out, frag...)
		switch {
		case err == nil:
			out = out[:len(out)-1]
			return bytes.TrimSuffix(out, []byte("\r")), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(out) > 0:
			return bytes.TrimSuffix(out, []byte("\r")), nil
		default:
			return nil, err
		}
	}
}
