package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// modulePath is the module path in doublerun's go.mod.
const modulePath = "github.com/doublerun/doublerun"

// errNotInRepo says the working directory is outside the repository.
var errNotInRepo = errors.New("the working directory is not inside the doublerun repository")

// repoFile returns rel, a path relative to the repository root such as a
// flag's default, as seen from the working directory: the root is the
// nearest directory at or above it whose go.mod declares modulePath, so
// the commands that read the repository's files run from any directory
// inside it. Other modules' go.mod files on the way (test fixtures) are
// passed over.
func repoFile(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if declaresModule(filepath.Join(dir, "go.mod"), modulePath) {
			if wd, err := os.Getwd(); err == nil && wd == dir {
				return rel, nil // keep it short in messages
			}
			return filepath.Join(dir, rel), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errNotInRepo
		}
		dir = parent
	}
}

// declaresModule reports whether the go.mod file declares module path.
func declaresModule(gomod, path string) bool {
	data, err := os.ReadFile(gomod)
	if err != nil {
		return false
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "module"); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
			name, _, _ := strings.Cut(strings.TrimSpace(rest), "//")
			return strings.Trim(strings.TrimSpace(name), `"`+"`") == path
		}
	}
	return false
}

// fileFlag is a flag whose default names a file of the repository.
type fileFlag struct {
	name  string
	value *string
}

// repoRoot is how a mutation subcommand that reads the repository's files
// starts: it resolves the default of each of flags against the repository
// root (defaultInRepo; a flag given is used as it is), naming command in
// the error, and returns the root.
func repoRoot(fs *flagSet, command string, flags ...fileFlag) (string, error) {
	for _, f := range flags {
		if err := defaultInRepo(fs, f.name, f.value, command, "--"+f.name+" FILE"); err != nil {
			return "", err
		}
	}
	return moduleRoot()
}

// defaultInRepo resolves the flag's value against the repository root
// when the command line left it at its default (a path relative to the
// root); a value the user gave is relative to the working directory, as
// usual. Outside the repository the error says where to run the command
// and, in instead, what to pass.
func defaultInRepo(fs *flagSet, flagName string, value *string, command, instead string) error {
	if fs.isSet(flagName) {
		return nil
	}
	path, err := repoFile(*value)
	if errors.Is(err, errNotInRepo) {
		return fmt.Errorf("cannot find %s: %v; run doublerun %s from inside it, or pass %s", *value, err, command, instead)
	}
	if err != nil {
		return err
	}
	*value = path
	return nil
}

// cleanHead returns HEAD's commit, or an error when the working tree has
// changes: a record names the code that passed.
func cleanHead(ctx context.Context, root string) (string, error) {
	status, err := gitOutput(ctx, root, "status", "--porcelain")
	if err != nil {
		return "", err
	}
	if status != "" {
		return "", fmt.Errorf("not writing the record: the working tree has changes (%s); commit them and run again", strings.SplitN(status, "\n", 2)[0])
	}
	return gitOutput(ctx, root, "rev-parse", "HEAD")
}

// commitCount is the number of commits in HEAD's history; the
// per-submission gate takes shard commitCount mod n, so n consecutive
// submissions cover every shard.
func commitCount(ctx context.Context, root string) (int, error) {
	out, err := gitOutput(ctx, root, "rev-list", "--count", "HEAD")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(out)
}

func gitOutput(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// moduleRoot is the repository root, found from the working directory.
func moduleRoot() (string, error) {
	p, err := repoFile("go.mod")
	if err != nil {
		return "", fmt.Errorf("%v; run the mutation commands from inside it", err)
	}
	return filepath.Abs(filepath.Dir(p))
}
