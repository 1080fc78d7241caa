package mutation

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"os/exec"
	"path/filepath"
	"strings"
)

// GuardPick is the named guards one per-submission run takes, and why.
type GuardPick struct {
	// Guards is what runs, in manifest order.
	Guards []Guard
	// Changed counts the guards picked because something they depend on
	// changed since the base; Shard those picked only for being in the
	// run's shard.
	Changed, Shard int
}

// PickGuards chooses the named guards of one per-submission run, the way
// the gremlins part chooses mutants. A guard runs at once when anything
// that decides its outcome changed since the record's base (changed holds
// the paths git diff names, relative to the module root):
//
//   - the file it mutates;
//   - any file of the package whose tests must catch it, tests and
//     testdata included, which is where a weakened assertion shows;
//   - the manifest it is listed in, so a new or edited guard runs.
//
// Every other guard runs when its shard comes round (GuardShard): n
// submissions in a row run every guard, and a change outside the gated
// files that breaks one (a shared test helper, say) is caught by then, as
// a weakened test is in the gremlins part.
func PickGuards(guards []Guard, root string, changed []string, shard, n int) GuardPick {
	in := map[string]bool{}
	for _, c := range changed {
		in[filepath.ToSlash(c)] = true
	}
	under := func(dir string) bool {
		for c := range in {
			if strings.HasPrefix(c, dir+"/") {
				return true
			}
		}
		return false
	}
	var p GuardPick
	for _, g := range guards {
		manifest := g.Manifest
		if rel, err := filepath.Rel(root, g.Manifest); err == nil {
			manifest = filepath.ToSlash(rel)
		}
		switch {
		case in[g.File] || in[manifest] || under(strings.TrimPrefix(g.Package, "./")):
			p.Changed++
		case GuardShard(g.ID, n) == shard:
			p.Shard++
		default:
			continue
		}
		p.Guards = append(p.Guards, g)
	}
	return p
}

// GuardShard is the shard, from 0 to n-1, a guard's ID falls in.
func GuardShard(id string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() % uint32(n))
}

// ChangedFiles lists the files changed between base and the working tree
// of the repository at root, relative to it.
func ChangedFiles(ctx context.Context, root, base string) ([]string, error) {
	cmd := exec.CommandContext(ctx, "git", "diff", "--no-color", "--name-only", "--no-renames", base, "--", ".")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git diff --name-only %s: %v: %s", base, err, strings.TrimSpace(stderr.String()))
	}
	var files []string
	for _, f := range strings.Split(string(out), "\n") {
		if f != "" {
			files = append(files, f)
		}
	}
	return files, nil
}
