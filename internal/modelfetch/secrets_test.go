package modelfetch_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/modelfetch"
)

// TestSecretsStayOut (issue 26 item 8): the CDN's signed query and the credentials of
// HF_ENDPOINT reach no error, log line (retry warnings included) or manifest. The logger here
// is a plain one, not a redacting one: the fetcher must not leak even to a handler that masks
// nothing.
func TestSecretsStayOut(t *testing.T) {
	hub, _, c, _, _ := setup(t)
	var logs bytes.Buffer
	f := &modelfetch.Fetcher{
		Endpoint:   strings.Replace(hub.URL, "://", "://user:secret@", 1) + "/",
		Logger:     slog.New(slog.NewTextHandler(&logs, nil)),
		BackoffMin: 1, BackoffMax: 1, Attempts: 2,
	}
	leaks := func(what, text string) {
		t.Helper()
		for _, s := range []string{hub.Signature, "secret", "user:"} {
			if strings.Contains(text, s) {
				t.Errorf("%s holds %q:\n%s", what, s, text)
			}
		}
	}
	leaks("Hub()", f.Hub())

	// Go's client quotes the URL in its errors (*url.Error): the CDN's with its signature.
	hub.Hangup(2)
	_, err := f.Pull(context.Background(), c, ref(t, pinned()))
	if err == nil {
		t.Fatal("Pull through a CDN that hangs up succeeded")
	}
	leaks("the error", err.Error())
	if !strings.Contains(logs.String(), "trying again") {
		t.Errorf("no retry warning logged:\n%s", logs.String())
	}
	leaks("the log", logs.String())

	e, err := f.Pull(context.Background(), c, ref(t, pinned()))
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := os.ReadFile(e.Path + ".toolmesh.json")
	if err != nil {
		t.Fatal(err)
	}
	leaks("the manifest", string(manifest))
	leaks("the entry's endpoint", e.Endpoint)

	// The hub itself unreachable: its URL, with the credentials, in Go's error.
	down := &modelfetch.Fetcher{Endpoint: "http://user:secret@127.0.0.1:1", Attempts: 1}
	_, err = down.Pull(context.Background(), modelfetch.Cache{Dir: t.TempDir()}, ref(t, pinned()))
	if err == nil {
		t.Fatal("Pull from a closed port succeeded")
	}
	leaks("the error of an unreachable hub", err.Error())
	if !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("error %q does not name the hub's address", err)
	}
}
