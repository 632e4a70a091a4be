package api

import (
	"encoding/json"
	"testing"
)

// TestOpenAPIInfo: the OpenAPI document names the API and its version, not the first proto
// file merged and "version not set" (issue 31).
func TestOpenAPIInfo(t *testing.T) {
	var doc struct {
		Info struct{ Title, Version, Description string }
	}
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Info.Title != "toolmesh API" || doc.Info.Version != "v1" || doc.Info.Description == "" {
		t.Errorf("info = %+v, want title toolmesh API, version v1 and a description", doc.Info)
	}
}
