package inference

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	toolmeshv1 "github.com/toolmesh/toolmesh/gen/toolmesh/v1"
)

func TestCatalogsReuseSameDefinitionsAtSameSize(t *testing.T) {
	c := newCatalogs(2)
	tools := calcTools(t)
	var withHash []*toolmeshv1.Tool
	for i, st := range tools {
		tl := proto.Clone(st.GetTool()).(*toolmeshv1.Tool)
		tl.Hash = "h" + string(rune('a'+i))
		withHash = append(withHash, tl)
	}
	a, _ := c.build(withHash, 511, false)
	b, _ := c.build(withHash, 511, false)
	if a != b {
		t.Error("same tools and size built twice")
	}
	if d, _ := c.build(withHash, 1023, false); d == a {
		t.Error("another size reused the first catalog")
	}
	if d, _ := c.build(withHash, 511, true); d == a || strings.Contains(d.Grammar(), "answer") {
		t.Error("a grammar without the answer branch reused the one with it")
	}
	changed := proto.Clone(withHash[0]).(*toolmeshv1.Tool)
	changed.Hash = "new"
	if d, _ := c.build(append([]*toolmeshv1.Tool{changed}, withHash[1:]...), 511, false); d == a {
		t.Error("a changed definition reused the old catalog")
	}
	// Capacity 2: the first entry is gone by now.
	if d, _ := c.build(withHash, 511, false); d == a {
		t.Error("the oldest entry was not evicted")
	}
	noHash := toolsOf(tools)
	x, _ := c.build(noHash, 511, false)
	y, _ := c.build(noHash, 511, false)
	if x == y {
		t.Error("tools without a hash were cached")
	}
}
