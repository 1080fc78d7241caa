package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/doublerun/doublerun/scenarios"
	"github.com/doublerun/doublerun/scenarios/oracle"
)

// LinearizabilityView is the file, beside timeline.svg, that holds
// porcupine's HTML view of a run's fence.
const LinearizabilityView = "linearizability.html"

// Write writes report.json, report.md and timeline.svg of r into
// outDir/<scenario name>, beside the replicas' logs the runner put there
// when RunOptions.OutDir was outDir, and linearizability.html when the
// run's fence was checked.
func Write(outDir string, r *scenarios.Report) error {
	dir := filepath.Join(outDir, filepath.FromSlash(r.Scenario.Name))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"report.json":  append(js, '\n'),
		"report.md":    []byte(Markdown(r)),
		"timeline.svg": []byte(SVG(r)),
	}
	if r.Metrics.Linearizability != nil {
		var view bytes.Buffer
		if err := oracle.VisualizeFence(&view, r.History, time.Duration(r.CheckTimeout)); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
		files[LinearizabilityView] = view.Bytes()
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
	}
	return nil
}
