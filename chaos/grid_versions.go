package chaos

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/doublerun/doublerun/scenarios"
)

// versionGrid holds, per version set (stack.VersionSets), the cells whose
// expectation on that set differs from grid's, which was measured on
// PostgreSQL 15 and PgBouncer 1.18: per fault, per strategy, the
// topologies that differ. A set missing here, or a cell missing from its
// block, takes grid's expectation. The measurements behind each entry are
// in "Versions" in the package documentation.
var versionGrid = map[string]map[string]map[string]Row{}

// ExpectOn is Expect on a version set: the set's override when it has one
// for the cell, else the grid's.
func ExpectOn(versions, strategy string, topology scenarios.TopologyKind, faultName string) (scenarios.Expectation, bool) {
	if e, ok := versionGrid[versions][faultName][strategy][topology]; ok {
		return e, true
	}
	return Expect(strategy, topology, faultName)
}

// OnVersions returns cells with each cell of the matrix expecting what it
// must show on the version set versions (ExpectOn). Cells that are not
// the matrix's (another name) keep their expectation.
func OnVersions(cells []scenarios.Scenario, versions string) []scenarios.Scenario {
	out := slices.Clone(cells)
	for i, sc := range out {
		if sc.Name != CellName(sc.Strategy, sc.Topology.Kind, sc.Fault) {
			continue
		}
		if e, ok := ExpectOn(versions, sc.Strategy, sc.Topology.Kind, sc.Fault); ok {
			out[i].Expect = e
		}
	}
	return out
}

// MatrixOn is Matrix with the expectations of the version set versions.
func MatrixOn(versions string, topologies ...scenarios.TopologyKind) []scenarios.Scenario {
	return OnVersions(Matrix(topologies...), versions)
}

// VersionOverrides renders versionGrid as text: a header, then a line per
// cell that differs, "SET  strategy/topology/FAULT  grid -> set"; the
// package documentation shows it.
func VersionOverrides() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-20s%-46s%s\n", "VERSIONS", "CELL", "GRID -> ON THE SET")
	for _, set := range slices.Sorted(maps.Keys(versionGrid)) {
		for _, f := range columns() {
			for _, s := range Strategies {
				for _, topo := range scenarios.Topologies {
					e, ok := versionGrid[set][f][s][topo]
					if !ok {
						continue
					}
					base, _ := Expect(s, topo, f)
					fmt.Fprintf(&b, "%-20s%-46s%s -> %s\n", set, CellName(s, topo, f), base, e)
				}
			}
		}
	}
	return b.String()
}
