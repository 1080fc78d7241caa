package mutation

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSelection(t *testing.T) {
	t.Parallel()
	a := Selection{"a.go": {1, 3}, "b.go": {2}}
	b := Selection{"a.go": {3, 4}}
	require.Equal(t, Selection{"a.go": {1, 3, 4}, "b.go": {2}}, a.Union(b))
	require.Equal(t, Selection{"a.go": {1}, "b.go": {2}}, a.Minus(b))
	require.Equal(t, 3, a.Lines())
	require.True(t, a.Has("a.go", 3))
	require.False(t, a.Has("a.go", 2))
	require.False(t, a.Has("c.go", 1))
	require.True(t, Selection(nil).Has("c.go", 1), "nil selects every line")
}

// Shards split a package's lines into disjoint sets that cover it, and a
// line keeps its shard when lines are added above it.
func TestShardSelection(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var src strings.Builder
	for i := range 400 {
		src.WriteString("\tx := y + " + strings.Repeat("z", i%7) + "\n")
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.go"), []byte(src.String()), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a_test.go"), []byte("package a\n"), 0o644))

	const n = 4
	all := Selection{}
	for k := range n {
		sel, err := ShardSelection(dir, k, n)
		require.NoError(t, err)
		require.Equal(t, []string{"a.go"}, keys(sel), "no test file")
		require.InDelta(t, 401/n, sel.Lines(), 401/n/2, "shard %d holds about a quarter of the lines", k)
		require.Zero(t, sel.Minus(all).Lines()-sel.Lines(), "shard %d shares no line with another", k)
		all = all.Union(sel)
	}
	require.Equal(t, 401, all.Lines(), "the shards cover every line (400 and the empty last)")

	before, err := ShardSelection(dir, 1, n)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.go"), []byte("package a\n\n"+src.String()), 0o644))
	after, err := ShardSelection(dir, 1, n)
	require.NoError(t, err)
	moved := Selection{}
	for _, l := range before["a.go"] {
		moved["a.go"] = append(moved["a.go"], l+2)
	}
	require.Empty(t, moved.Minus(after)["a.go"], "every line of the shard is still in it, two lines down")

	_, err = ShardSelection(dir, 4, n)
	require.ErrorContains(t, err, "need 0 <= k < n")
}

func keys(s Selection) []string {
	var out []string
	for k := range s {
		out = append(out, k)
	}
	return out
}

func TestParseChangedLines(t *testing.T) {
	t.Parallel()
	diff := `diff --git a/fenced.go b/fenced.go
index 1..2 100644
--- a/fenced.go
+++ b/fenced.go
@@ -10,0 +11,2 @@ func x() {
+	a := 1
+	b := 2
@@ -20 +22 @@ func y() {
-	old
+	new
@@ -30,3 +31,0 @@ func z() {
-	gone
diff --git a/fenced_test.go b/fenced_test.go
--- a/fenced_test.go
+++ b/fenced_test.go
@@ -1 +1 @@
+	test
diff --git a/old.go b/old.go
--- a/old.go
+++ /dev/null
@@ -1 +0,0 @@
-	deleted
diff --git a/doc.md b/doc.md
--- a/doc.md
+++ b/doc.md
@@ -1 +1 @@
+	text
`
	sel, err := parseChangedLines([]byte(diff))
	require.NoError(t, err)
	require.Equal(t, Selection{"fenced.go": {11, 12, 22}}, sel)

	_, err = parseChangedLines([]byte("+++ b/a.go\n@@ bogus @@\n"))
	require.ErrorContains(t, err, "a hunk header")
}

// Diff writes what gremlins' diff parser reads: the selected lines as
// added, one hunk per run of consecutive lines.
func TestSelectionDiff(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.go"), []byte("one\ntwo\nthree\nfour\n"), 0o644))
	diff, err := Selection{"a.go": {1, 2, 4}}.Diff(dir)
	require.NoError(t, err)
	require.Equal(t, "diff --git a/a.go b/a.go\n--- a/a.go\n+++ b/a.go\n@@ -0,0 +1,2 @@\n+one\n+two\n@@ -3,0 +4,1 @@\n+four\n", string(diff))
	back, err := parseChangedLines(diff)
	require.NoError(t, err)
	require.Equal(t, Selection{"a.go": {1, 2, 4}}, back, "what Diff writes, a diff reader reads back")

	_, err = Selection{"a.go": {9}}.Diff(dir)
	require.ErrorContains(t, err, "a.go has no line 9")
}

// ChangedLines reads what differs from a commit in one package of a real
// repository, committed or not, on the new side's line numbers.
func TestChangedLines(t *testing.T) {
	t.Parallel()
	root, git, write := scratchRepo(t)
	write("lease/a.go", "a\nb\nc\n")
	write("worker/w.go", "w\n")
	git("add", ".")
	git("commit", "-qm", "one")
	base := git("rev-parse", "HEAD")
	write("lease/a.go", "a\nB\nc\nd\n")
	git("commit", "-qam", "two")
	write("lease/a_test.go", "t\n")
	write("lease/new.go", "n\n") // untracked: not part of the diff yet
	write("worker/w.go", "W\n")  // another package

	sel, err := ChangedLines(t.Context(), root, base, "lease")
	require.NoError(t, err)
	require.Equal(t, Selection{"a.go": {2, 4}}, sel)
	_, err = ChangedLines(t.Context(), root, "no-such-commit", "lease")
	require.ErrorContains(t, err, "git diff no-such-commit in lease")
}

// scratchRepo is an empty git repository in a temp dir, with a git
// command runner and a file writer for it.
func scratchRepo(t *testing.T) (root string, git func(args ...string) string, write func(name, text string)) {
	t.Helper()
	root = t.TempDir()
	git = func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
		return strings.TrimSpace(string(out))
	}
	write = func(name, text string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, name), []byte(text), 0o644))
	}
	git("init", "-q")
	return root, git, write
}
