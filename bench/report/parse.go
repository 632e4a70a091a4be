package main

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// The two programs read here are Go test binaries outside bench/ (services/inference/gorilla's
// BenchmarkStep, cmd/toolmesh/app's browser test), so they get no -json flag; what is read is the
// testing package's benchmark line format and the test's own log lines.

var benchLine = regexp.MustCompile(`(?m)^BenchmarkStep/(cold|cached)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op(?:\s+([\d.]+) B/op)?(?:\s+([\d.]+) allocs/op)?`)

// parseStep reads BenchmarkStep's two lines (cold and cached) from `go test -bench` output.
func parseStep(out string) (stepBench, error) {
	var sb stepBench
	seen := map[string]bool{}
	f := func(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v }
	for _, m := range benchLine.FindAllStringSubmatch(out, -1) {
		r := benchResult{NsPerOp: f(m[2]), BytesPerOp: f(m[3]), AllocsPerOp: f(m[4])}
		if m[1] == "cold" {
			sb.Cold = r
		} else {
			sb.Cached = r
		}
		seen[m[1]] = true
	}
	for _, name := range []string{"cold", "cached"} {
		if !seen[name] {
			return stepBench{}, fmt.Errorf("no BenchmarkStep/%s line in the output", name)
		}
	}
	return sb, nil
}

var (
	firstLoadLine = regexp.MustCompile(`first load: (\d+) requests, ([\d.]+) KB transferred \(([\d.]+) KB of bodies\)`)
	shownLine     = regexp.MustCompile(`servers on screen after navigation, \d+ first loads: min (\d+) ms, median (\d+) ms, max (\d+) ms`)
	// A skip's reason is the log line just before `--- SKIP`.
	skipLine = regexp.MustCompile(`(?m)^\s+\w+_test\.go:\d+: (.+)\n\s*--- SKIP: `)
)

// parseConsole reads the browser test's log lines. A skipped test gives its reason; a test that
// ran but logged neither figure is an error.
func parseConsole(out string) (c consoleFigures, skip string, err error) {
	if m := firstLoadLine.FindStringSubmatch(out); m != nil {
		c.Requests, _ = strconv.Atoi(m[1])
		c.TransferKB, _ = strconv.ParseFloat(m[2], 64)
		c.BodiesKB, _ = strconv.ParseFloat(m[3], 64)
		c.HaveTransfer = true
	}
	if m := shownLine.FindStringSubmatch(out); m != nil {
		c.MinMS, _ = strconv.ParseFloat(m[1], 64)
		c.MedianMS, _ = strconv.ParseFloat(m[2], 64)
		c.MaxMS, _ = strconv.ParseFloat(m[3], 64)
		c.HaveServersMS = true
	}
	if c.HaveTransfer || c.HaveServersMS {
		return c, "", nil
	}
	if m := skipLine.FindStringSubmatch(out); m != nil {
		return c, strings.TrimSpace(m[1]), nil
	}
	return c, "", errors.New("the browser test logged no first-load figures")
}
