package mcpconfig

import (
	"strings"
	"testing"
)

func TestOAuthSettings(t *testing.T) {
	env := map[string]string{"BILLING_SECRET": "s3cr3t-value"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for _, tc := range []struct {
		name, doc string
		want      func(t *testing.T, s Server)
		wantErr   []string // each must appear; the secret never does
	}{
		{name: "auth oauth alone", doc: `{"mcpServers":{"linear":{"url":"https://mcp.example.com/mcp","auth":"oauth"}}}`,
			want: func(t *testing.T, s Server) {
				if s.Auth != AuthOAuth || s.OAuth.GrantType() != GrantAuthorizationCode {
					t.Errorf("got auth %q grant %q, want oauth authorization_code", s.Auth, s.OAuth.GrantType())
				}
			}},
		{name: "client credentials", doc: `{"mcpServers":{"billing":{"url":"https://b.example.com/mcp","oauth":{"grant":"client_credentials","clientId":"tm","clientSecret":"${BILLING_SECRET}","scopes":["mcp"]}}}}`,
			want: func(t *testing.T, s Server) {
				if s.Auth != AuthOAuth || s.OAuth.ClientSecret != "s3cr3t-value" || s.OAuth.ClientID != "tm" || len(s.OAuth.Scopes) != 1 {
					t.Errorf("got %+v", s.OAuth)
				}
				if strings.Contains(s.String(), "s3cr3t") {
					t.Errorf("String() shows the secret: %s", s)
				}
			}},
		{name: "inline secret", doc: `{"mcpServers":{"b":{"url":"https://b.example.com/mcp","oauth":{"clientId":"tm","clientSecret":"hunter2-inline"}}}}`,
			wantErr: []string{`oauth.clientSecret: must be a ${VAR} reference`}},
		{name: "cc without secret", doc: `{"mcpServers":{"b":{"url":"https://b.example.com/mcp","oauth":{"grant":"client_credentials","clientId":"tm"}}}}`,
			wantErr: []string{"oauth.clientSecret: required for the client_credentials grant"}},
		{name: "stdio", doc: `{"mcpServers":{"b":{"command":"x","auth":"oauth"}}}`,
			wantErr: []string{"auth: oauth only applies to remote"}},
		{name: "authorization header", doc: `{"mcpServers":{"b":{"url":"https://b.example.com/mcp","auth":"oauth","headers":{"Authorization":"Bearer x"}}}}`,
			wantErr: []string{"headers.Authorization: cannot be combined with auth: oauth"}},
		{name: "bad grant", doc: `{"mcpServers":{"b":{"url":"https://b.example.com/mcp","oauth":{"grant":"password"}}}}`,
			wantErr: []string{`oauth.grant: "password" is not authorization_code or client_credentials`}},
		{name: "misspelt key", doc: `{"mcpServers":{"b":{"url":"https://b.example.com/mcp","oauth":{"clientid":"x"}}}}`,
			wantErr: []string{`oauth.clientid: unknown key (did you mean "clientId"?)`}},
		{name: "bad auth", doc: `{"mcpServers":{"b":{"url":"https://b.example.com/mcp","auth":"basic"}}}`,
			wantErr: []string{`auth: "basic" is not oauth`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			servers, err := Parse([]byte(tc.doc), lookup)
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("no error, want %q", tc.wantErr)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Errorf("error quotes the inline secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range servers {
				tc.want(t, s)
			}
		})
	}
}
