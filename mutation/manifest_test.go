package mutation

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestApply(t *testing.T) {
	t.Parallel()
	src := []byte("if a {\n\treturn x\n}\nreturn xx\n")
	for _, tc := range []struct {
		name, snippet, replacement string
		want, err                  string
	}{
		{"ReplacesTheOneMatch", "if a {", "if false {", "if false {\n\treturn x\n}\nreturn xx\n", ""},
		{"MultiLineSnippet", "\treturn x\n}", "\treturn y\n}", "if a {\n\treturn y\n}\nreturn xx\n", ""},
		{"Missing", "if b {", "", "", "snippet not found in f.go"},
		{"TwiceIsAmbiguous", "return x", "return y", "", "snippet occurs more than once in f.go"},
		{"OverlappingMatchesCount", "x\n", "", "", "snippet occurs more than once"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Guard{File: "f.go", Snippet: tc.snippet, Replacement: tc.replacement}.Apply(src)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, string(got))
		})
	}
}

func TestLoadManifests(t *testing.T) {
	t.Parallel()
	valid := `{"id":"m.a","package":"./p","file":"p/p.go","snippet":"a","replacement":"b","run":"^TestA$","why":"w"}`

	t.Run("FindsTheModuleRootAboveTheManifest", func(t *testing.T) {
		t.Parallel()
		guards, err := LoadManifests(filepath.Join("testdata", "fixture", "guards", "*.guards.json"))
		require.NoError(t, err)
		root, err := filepath.Abs(filepath.Join("testdata", "fixture"))
		require.NoError(t, err)
		var ids []string
		for _, g := range guards {
			ids = append(ids, g.ID)
			require.Equal(t, root, g.Root)
		}
		// block < outcomes < timeout: file name order, then manifest order.
		require.Equal(t, []string{"fixture.block", "fixture.cap-at-high", "fixture.floor-at-low"}, ids[:3])
		require.Equal(t, "fixture.loop-step", ids[len(ids)-1])
		require.Equal(t, filepath.Join(root, "clamp", "clamp.go"), guards[1].Path())
	})
	t.Run("NoMatch", func(t *testing.T) {
		t.Parallel()
		_, err := LoadManifests(filepath.Join(t.TempDir(), "*.guards.json"))
		require.ErrorContains(t, err, "no guard manifest matches")
	})
	for _, tc := range []struct {
		name, manifests, err string
	}{
		{"UnknownField", `{"guards":[{"id":"x","snipet":"a"}]}`, `unknown field "snipet"`},
		{"MissingFields", `{"guards":[{"id":"x","package":"./p","file":"p/p.go","replacement":"b"}]}`, "guard x: missing snippet, run, why"},
		{"ReplacementEqualsSnippet", `{"guards":[{"id":"x","package":"./p","file":"p/p.go","snippet":"a","replacement":"a","run":"T","why":"w"}]}`, "replacement equals snippet"},
		{"FileOutsideTheModule", `{"guards":[{"id":"x","package":"./p","file":"../p.go","snippet":"a","replacement":"b","run":"T","why":"w"}]}`, "must be relative to the module root"},
		{"PackagePattern", `{"guards":[{"id":"x","package":"./...","file":"p/p.go","snippet":"a","replacement":"b","run":"T","why":"w"}]}`, "must be one package"},
		{"BadRunPattern", `{"guards":[{"id":"x","package":"./p","file":"p/p.go","snippet":"a","replacement":"b","run":"(","why":"w"}]}`, "is not a regular expression"},
		{"DuplicateID", `{"guards":[` + valid + `,` + valid + `]}`, `guard id "m.a" is already used`},
		{"Empty", `{"guards":[]}`, "hold no guards"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module m\n"), 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "a.guards.json"), []byte(tc.manifests), 0o644))
			_, err := LoadManifests(filepath.Join(dir, "*.guards.json"))
			require.ErrorContains(t, err, tc.err)
		})
	}
	t.Run("NoModule", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "a.guards.json"), []byte(`{"guards":[`+valid+`]}`), 0o644))
		_, err := LoadManifests(filepath.Join(dir, "*.guards.json"))
		require.ErrorContains(t, err, "no go.mod at or above")
	})
}
