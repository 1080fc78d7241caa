package mutation

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// MergeReports joins reports of one package that ran disjoint selections
// (the shards of a nightly run) into the report of the whole: each
// mutant's status is the one from the report that ran it (every other
// report lists it SKIPPED), and the wall times add up.
func MergeReports(reports []Report) (Report, error) {
	if len(reports) == 0 {
		return Report{}, fmt.Errorf("no report to merge")
	}
	type key struct {
		file      string
		line, col int
		typ       string
	}
	status := map[key]string{}
	var order []key
	out := Report{GoModule: reports[0].GoModule}
	for _, r := range reports {
		if r.GoModule != out.GoModule {
			return Report{}, fmt.Errorf("reports of two modules: %s and %s", out.GoModule, r.GoModule)
		}
		out.ElapsedTime += r.ElapsedTime
		for _, f := range r.Files {
			for _, m := range f.Mutations {
				k := key{f.FileName, m.Line, m.Column, m.Type}
				old, seen := status[k]
				if !seen {
					order = append(order, k)
				}
				switch {
				case !seen || old == StatusSkipped:
					status[k] = m.Status
				case m.Status != StatusSkipped && m.Status != old:
					return Report{}, fmt.Errorf("%s:%d:%s ran in two reports, %s and %s; merge the reports of one run's shards", f.FileName, m.Line, m.Type, old, m.Status)
				}
			}
		}
	}
	slices.SortStableFunc(order, func(a, b key) int {
		return cmp.Or(cmp.Compare(a.file, b.file), cmp.Compare(a.line, b.line), cmp.Compare(a.col, b.col))
	})
	for _, k := range order {
		if len(out.Files) == 0 || out.Files[len(out.Files)-1].FileName != k.file {
			out.Files = append(out.Files, ReportFile{FileName: k.file})
		}
		f := &out.Files[len(out.Files)-1]
		f.Mutations = append(f.Mutations, Mutation{Type: k.typ, Status: status[k], Line: k.line, Column: k.col})
	}
	s := out.count()
	out.MutantsKilled, out.MutantsLived, out.MutantsNotCovered, out.MutantsNotViable = s.Killed, s.Lived, s.NotCovered, s.NotViable
	out.MutantsTotal = s.Killed + s.Lived + s.NotViable
	out.TestEfficacy, out.MutationsCoverage = s.Efficacy(), s.Coverage()
	return out, nil
}

// RecordFrom is the record of a gate run that passed on every mutant of
// the packages in reports, at commit base: per package the cost of a
// mutant and every mutant by identity with its status, kind saying which
// kind of run measured them (KindFull, or KindDryRun for a dry run's
// reports). root is the module root, whose sources give each mutant its
// identity.
func RecordFrom(root, base string, shards int, reports []PackageReport, kind string) (Record, error) {
	rec := Record{Base: base, Shards: shards, Packages: map[string]PackageRecord{}}
	for _, pr := range reports {
		ms, err := Identify(root, pr.Name, pr.Report, kind)
		if err != nil {
			return Record{}, fmt.Errorf("record: %w", err)
		}
		p := PackageRecord{Mutants: ms}
		if per := pr.Report.count().PerMutant(time.Duration(pr.Report.ElapsedTime * float64(time.Second))); per > 0 && kind != KindDryRun {
			p.SecondsPerMutant = math.Ceil(per.Seconds()*100) / 100 // rounded up: an estimate errs long
		}
		rec.Packages[pr.Name] = p
	}
	return rec, nil
}
