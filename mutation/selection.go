package mutation

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Selection is a set of source lines of one package whose mutants gremlins
// should run: file names relative to the package directory, as gremlins
// names them ("fenced.go"), to line numbers. A nil Selection means every
// line. gremlins v0.6.0 reads a selection as a git diff (--diff, see
// Unleash), so a selection of no lines must never reach it: an empty diff
// means every mutant there.
type Selection map[string][]int

// Lines returns how many lines s selects.
func (s Selection) Lines() int {
	n := 0
	for _, ls := range s {
		n += len(ls)
	}
	return n
}

// Has reports whether s selects line of file. A nil Selection has every
// line.
func (s Selection) Has(file string, line int) bool {
	if s == nil {
		return true
	}
	_, ok := slices.BinarySearch(s[file], line)
	return ok
}

// Union returns the lines of s and o.
func (s Selection) Union(o Selection) Selection {
	out := Selection{}
	for _, sel := range []Selection{s, o} {
		for f, ls := range sel {
			out[f] = append(out[f], ls...)
		}
	}
	for f, ls := range out {
		slices.Sort(ls)
		out[f] = slices.Compact(ls)
	}
	return out
}

// Minus returns the lines of s that o does not select.
func (s Selection) Minus(o Selection) Selection {
	out := Selection{}
	for f, ls := range s {
		for _, l := range ls {
			if !o.Has(f, l) {
				out[f] = append(out[f], l)
			}
		}
	}
	return out
}

// sourceFiles lists the Go files gremlins looks at in dir, relative to it:
// every .go file that is not a test, in subdirectories too. (gremlins
// leaves out what its exclude-files match itself; lines selected there
// give no mutant.)
func sourceFiles(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || filepath.Ext(path) != ".go" || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	slices.Sort(files)
	return files, err
}

// ShardOf is the shard, 0 to n-1, of a source line: a hash of the file's
// name, the line's text without surrounding blanks, and how many lines of
// the same text come before it in the file. A line keeps its shard when
// lines above it are added or removed, so a shard's mutants stay the same
// from one submission to the next unless their own lines change, and
// hundreds of mutants spread about evenly over the shards.
func ShardOf(file, text string, occurrence, n int) int {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s\x00%s\x00%d", file, strings.TrimSpace(text), occurrence)
	return int(h.Sum32() % uint32(n))
}

// ShardSelection selects the lines of the package in dir that fall in
// shard k of n (ShardOf).
func ShardSelection(dir string, k, n int) (Selection, error) {
	if n < 1 || k < 0 || k >= n {
		return nil, fmt.Errorf("shard %d of %d: need 0 <= k < n", k, n)
	}
	files, err := sourceFiles(dir)
	if err != nil {
		return nil, err
	}
	sel := Selection{}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return nil, err
		}
		seen := map[string]int{}
		for i, text := range strings.Split(string(data), "\n") {
			key := strings.TrimSpace(text)
			if ShardOf(f, key, seen[key], n) == k {
				sel[f] = append(sel[f], i+1)
			}
			seen[key]++
		}
	}
	return sel, nil
}

// shardOfLines returns, for every line of file (numbered from 1), its
// shard of n; the gate uses it to tell which shard a mutant counts in.
func shardOfLines(file string, data []byte, n int) []int {
	lines := strings.Split(string(data), "\n")
	out := make([]int, len(lines)+1)
	seen := map[string]int{}
	for i, text := range lines {
		key := strings.TrimSpace(text)
		out[i+1] = ShardOf(file, key, seen[key], n)
		seen[key]++
	}
	return out
}

// ChangedLines selects the lines of the package pkg (a directory relative
// to the repository root in root) that differ from commit base: added or
// changed in the working tree, committed or not (untracked files are not
// in it). Deleted lines leave no mutant to run; test files have none.
func ChangedLines(ctx context.Context, root, base, pkg string) (Selection, error) {
	cmd := exec.CommandContext(ctx, "git", "diff", "--no-color", "--no-ext-diff", "-U0", "--relative="+pkg, base, "--", ".")
	cmd.Dir = filepath.Join(root, pkg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git diff %s in %s: %v: %s", base, pkg, err, strings.TrimSpace(stderr.String()))
	}
	return parseChangedLines(out)
}

// hunk matches a unified diff's hunk header; the new side's start and
// count are what a selection needs.
var hunk = regexp.MustCompile(`^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@`)

// parseChangedLines reads `git diff -U0` output into the lines added on
// the new side.
func parseChangedLines(diff []byte) (Selection, error) {
	sel := Selection{}
	file := ""
	sc := bufio.NewScanner(bytes.NewReader(diff))
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "+++ "):
			file = ""
			name := strings.TrimPrefix(line, "+++ ")
			if name == "/dev/null" {
				continue
			}
			name = strings.TrimPrefix(name, "b/")
			if filepath.Ext(name) != ".go" || strings.HasSuffix(name, "_test.go") {
				continue
			}
			file = name
		case strings.HasPrefix(line, "@@ ") && file != "":
			m := hunk.FindStringSubmatch(line)
			if m == nil {
				return nil, fmt.Errorf("git diff: a hunk header gremlins' selection cannot read: %q", line)
			}
			start, _ := strconv.Atoi(m[1])
			count := 1
			if m[2] != "" {
				count, _ = strconv.Atoi(m[2])
			}
			for l := start; l < start+count; l++ {
				sel[file] = append(sel[file], l)
			}
		}
	}
	return sel, sc.Err()
}

// Diff renders s as the unified diff gremlins v0.6.0 reads for --diff:
// every selected line of the package in dir as an added line, in hunks of
// consecutive lines. gremlins counts a hunk's added lines and where they
// start; it never compares their text.
func (s Selection) Diff(dir string) ([]byte, error) {
	var b bytes.Buffer
	for _, f := range slices.Sorted(maps.Keys(s)) {
		ls := s[f]
		if len(ls) == 0 {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return nil, err
		}
		text := strings.Split(string(data), "\n")
		fmt.Fprintf(&b, "diff --git a/%s b/%s\n--- a/%s\n+++ b/%s\n", f, f, f, f)
		for i := 0; i < len(ls); {
			j := i
			for j+1 < len(ls) && ls[j+1] == ls[j]+1 {
				j++
			}
			fmt.Fprintf(&b, "@@ -%d,0 +%d,%d @@\n", ls[i]-1, ls[i], j-i+1)
			for _, l := range ls[i : j+1] {
				if l < 1 || l > len(text) {
					return nil, fmt.Errorf("%s has no line %d", f, l)
				}
				b.WriteString("+" + text[l-1] + "\n")
			}
			i = j + 1
		}
	}
	return b.Bytes(), nil
}
