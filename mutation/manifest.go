package mutation

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// DefaultManifests is where `doublerun mutation guards` looks for guard
// manifests, relative to the repository root.
const DefaultManifests = "testdata/mutation/*.guards.json"

// Manifest is one guard manifest file: testdata/mutation/README.md
// documents the format.
type Manifest struct {
	Guards []Guard `json:"guards"`
}

// Guard is one named mutant: an exact edit of one file that the tests
// matching Run in Package must catch.
type Guard struct {
	// ID names the guard in output, for example "lease.pid-equality".
	ID string `json:"id"`
	// Package is what go test runs, relative to the module root ("./lease").
	Package string `json:"package"`
	// File is the file to mutate, relative to the module root, with
	// forward slashes ("lease/advisory.go").
	File string `json:"file"`
	// Snippet is exact text that must occur exactly once in File.
	Snippet string `json:"snippet"`
	// Replacement replaces Snippet in the mutant.
	Replacement string `json:"replacement"`
	// Run is the go test -run pattern of the tests that must fail.
	Run string `json:"run"`
	// Why says in one line what removing the guard would break.
	Why string `json:"why"`

	// Manifest is the manifest file the guard came from.
	Manifest string `json:"-"`
	// Root is the module root: the nearest directory at or above the
	// manifest's that holds a go.mod. Package and File are relative to it
	// and go test runs in it.
	Root string `json:"-"`
}

// LoadManifests reads every manifest matching glob, in file name order,
// and checks each guard's fields. Guard ids must be unique across all of
// them. It does not look at the files the guards mutate: a snippet that no
// longer matches is the NotApplied outcome, not a load error.
func LoadManifests(glob string) ([]Guard, error) {
	files, err := filepath.Glob(glob)
	if err != nil {
		return nil, fmt.Errorf("manifest pattern %q: %w", glob, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no guard manifest matches %q; run from the repository root or pass --manifest", glob)
	}
	sort.Strings(files)
	var guards []Guard
	seen := map[string]string{}
	var errs []error
	for _, f := range files {
		gs, err := loadManifest(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, g := range gs {
			if prev, ok := seen[g.ID]; ok {
				errs = append(errs, fmt.Errorf("%s: guard id %q is already used in %s", f, g.ID, prev))
				continue
			}
			seen[g.ID] = f
			guards = append(guards, g)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(guards) == 0 {
		return nil, fmt.Errorf("manifests matching %q hold no guards", glob)
	}
	return guards, nil
}

func loadManifest(file string) ([]Guard, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: not a guard manifest: %w", file, err)
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, err
	}
	root, err := moduleRoot(filepath.Dir(abs))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var errs []error
	for i := range m.Guards {
		g := &m.Guards[i]
		g.Manifest, g.Root = file, root
		if err := g.validate(); err != nil {
			name := g.ID
			if name == "" {
				name = fmt.Sprintf("#%d", i+1)
			}
			errs = append(errs, fmt.Errorf("%s: guard %s: %w", file, name, err))
		}
	}
	return m.Guards, errors.Join(errs...)
}

func (g Guard) validate() error {
	var missing []string
	for _, f := range []struct{ name, value string }{
		{"id", g.ID}, {"package", g.Package}, {"file", g.File}, {"snippet", g.Snippet}, {"run", g.Run}, {"why", g.Why},
	} {
		if strings.TrimSpace(f.value) == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s", strings.Join(missing, ", "))
	}
	if g.Snippet == g.Replacement {
		return errors.New("replacement equals snippet, so the mutant is the original")
	}
	if !filepath.IsLocal(filepath.FromSlash(g.File)) {
		return fmt.Errorf("file %q must be relative to the module root and inside it", g.File)
	}
	if !strings.HasPrefix(g.Package, "./") && g.Package != "." || strings.Contains(g.Package, "...") {
		return fmt.Errorf("package %q must be one package relative to the module root, such as ./lease", g.Package)
	}
	if !filepath.IsLocal(filepath.FromSlash(path.Clean(g.Package))) && path.Clean(g.Package) != "." {
		return fmt.Errorf("package %q must be inside the module root", g.Package)
	}
	if _, err := regexp.Compile(g.Run); err != nil {
		return fmt.Errorf("run %q is not a regular expression: %w", g.Run, err)
	}
	return nil
}

// Path is the absolute path of the guard's file.
func (g Guard) Path() string { return filepath.Join(g.Root, filepath.FromSlash(g.File)) }

// moduleRoot returns the nearest directory at or above dir with a go.mod.
func moduleRoot(dir string) (string, error) {
	for d := dir; ; {
		if fi, err := os.Stat(filepath.Join(d, "go.mod")); err == nil && !fi.IsDir() {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no go.mod at or above %s; a manifest must live inside the module it mutates", dir)
		}
		d = parent
	}
}

// Apply returns the guard's file with the snippet replaced. It fails when
// the snippet is missing or occurs more than once (overlapping matches
// count), which is the NotApplied outcome.
func (g Guard) Apply(src []byte) ([]byte, error) {
	s, snip := string(src), g.Snippet
	i := strings.Index(s, snip)
	if i < 0 {
		return nil, fmt.Errorf("snippet not found in %s", g.File)
	}
	if j := strings.Index(s[i+1:], snip); j >= 0 {
		return nil, fmt.Errorf("snippet occurs more than once in %s (at offsets %d and %d); make it longer", g.File, i, i+1+j)
	}
	return []byte(s[:i] + g.Replacement + s[i+len(snip):]), nil
}
