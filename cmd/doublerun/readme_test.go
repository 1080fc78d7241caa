package main

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// README.md's table of exit codes says what each code means and gives
// examples; each example is run here and must exit as its row says, with
// stderr shaped as the row's last column says. An example followed by
// "then Ctrl-C" is interrupted once it is ready.
func TestExitCodesAsTheREADMESays(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	rows := exitTable(t, string(readme))
	require.GreaterOrEqual(t, len(rows), 5, "README.md has the table of exit codes")
	codes := map[int]bool{}
	for _, r := range rows {
		codes[r.code] = true
		for _, ex := range r.examples {
			t.Run(strconv.Itoa(r.code)+"/"+ex, func(t *testing.T) {
				t.Parallel()
				env, args := splitExample(t, ex)
				cmd := cliCommand(t, env, args...)
				cmd.Dir = root
				var stdout bytes.Buffer
				cmd.Stdout = &stdout
				var stderr syncBuffer
				cmd.Stderr = &stderr
				if r.interrupt {
					require.NoError(t, cmd.Start())
					t.Cleanup(func() { _ = cmd.Process.Kill() })
					require.Eventually(t, func() bool { return strings.Contains(stderr.String(), `msg="stack up"`) },
						5*time.Minute, 100*time.Millisecond, "%s is not ready: %s", ex, stderr.String())
					require.NoError(t, cmd.Process.Signal(os.Interrupt))
					_ = cmd.Wait()
				} else {
					_ = cmd.Run()
				}
				require.Equal(t, r.code, cmd.ProcessState.ExitCode(), "stderr: %s", stderr.String())
				lines := messageLines(stderr.String())
				switch {
				case strings.Contains(r.stderr, "then the usage"):
					require.GreaterOrEqual(t, len(lines), 3, "a line, then the usage: %q", stderr.String())
					require.Empty(t, lines[1])
					require.True(t, strings.HasPrefix(lines[2], "Usage"), "then the usage: %q", stderr.String())
				case strings.HasPrefix(r.stderr, "one line"):
					require.Len(t, lines, 1, "one line: %q", stderr.String())
					require.True(t, strings.HasPrefix(lines[0], "doublerun "+args[0]+": "), lines[0])
				default:
					require.Empty(t, lines, "only logs")
					require.NotEmpty(t, stdout.String())
				}
			})
		}
	}
	for _, c := range []int{0, 1, 2, 130} {
		require.True(t, codes[c], "the table has a row for exit %d", c)
	}
}

// exitRow is a row of README.md's table of exit codes.
type exitRow struct {
	code      int
	examples  []string
	interrupt bool // the examples are stopped with Ctrl-C
	stderr    string
}

// exitTable reads the rows of the table whose header is "| exit | meaning
// | for example | on stderr |".
func exitTable(t *testing.T, readme string) []exitRow {
	t.Helper()
	_, table, ok := strings.Cut(readme, "| exit | meaning | for example | on stderr |\n")
	require.True(t, ok, "README.md has the table of exit codes")
	span := regexp.MustCompile("`([^`]+)`")
	var rows []exitRow
	sc := bufio.NewScanner(strings.NewReader(table))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 4 || strings.HasPrefix(cells[0], " ---") {
			continue
		}
		code, err := strconv.Atoi(strings.TrimSpace(cells[0]))
		require.NoError(t, err, line)
		r := exitRow{code: code, interrupt: strings.Contains(cells[2], "then Ctrl-C"), stderr: strings.TrimSpace(cells[3])}
		for _, m := range span.FindAllStringSubmatch(cells[2], -1) {
			r.examples = append(r.examples, m[1])
		}
		require.NotEmpty(t, r.examples, "row %q has an example", line)
		rows = append(rows, r)
	}
	return rows
}

// splitExample splits "VAR=x doublerun cmd args" into the environment and
// the arguments.
func splitExample(t *testing.T, ex string) (env, args []string) {
	t.Helper()
	f := strings.Fields(ex)
	for i, w := range f {
		if w == "doublerun" {
			return f[:i], f[i+1:]
		}
		require.Contains(t, w, "=", "example %q: VAR=value words, then doublerun", ex)
	}
	t.Fatalf("example %q does not run doublerun", ex)
	return nil, nil
}

// messageLines are stderr's lines without the log lines.
func messageLines(stderr string) []string {
	m := strings.TrimSuffix(messages(stderr), "\n")
	if m == "" {
		return nil
	}
	return strings.Split(m, "\n")
}
