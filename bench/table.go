package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
)

// Row is one line of the results table. Every headline row compares a
// measurement with a floor or peer measured in the same run, because an
// absolute number from a shared 2-core machine means little on its own.
type Row struct {
	Section     string  `json:"section"`
	Measurement string  `json:"measurement"`
	Value       string  `json:"value"`           // the absolute measurement, with unit
	Floor       string  `json:"floor,omitempty"` // the floor or peer, with unit
	Ratio       float64 `json:"ratio,omitempty"` // value/floor (or as the row says)
	RatioText   string  `json:"ratioText,omitempty"`
	Target      string  `json:"target,omitempty"`
	Verdict     string  `json:"verdict"` // pass, miss, info or N/A
	Note        string  `json:"note,omitempty"`

	// Raw numbers for results.json consumers, in the units named by keys.
	Raw map[string]float64 `json:"raw,omitempty"`
}

const (
	verdictPass = "pass"
	verdictMiss = "miss"
	verdictInfo = "info"
	verdictNA   = "N/A"
)

// judge turns a target predicate into a verdict.
func judge(ok bool) string {
	if ok {
		return verdictPass
	}
	return verdictMiss
}

// naRow is a row that could not be measured, with the reason.
func naRow(section, measurement, reason string) Row {
	return Row{Section: section, Measurement: measurement, Value: "N/A", Verdict: verdictNA, Note: reason}
}

// Results collects the rows of one run.
type Results struct {
	Rows []Row `json:"rows"`
}

func (r *Results) add(rows ...Row) { r.Rows = append(r.Rows, rows...) }

// Print writes the table: one block per section, notes (N/A reasons and
// caveats) listed below it so the columns stay narrow.
func (r *Results) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tmeasurement\tvalue\tfloor/peer\tratio\ttarget\tpass/miss")
	var notes []string
	section := ""
	for _, row := range r.Rows {
		label := ""
		if row.Section != section {
			section, label = row.Section, row.Section
		}
		ratio := row.RatioText
		if ratio == "" && row.Ratio != 0 {
			ratio = formatRatio(row.Ratio)
		}
		verdict := row.Verdict
		if row.Note != "" {
			notes = append(notes, fmt.Sprintf("[%d] %s: %s", len(notes)+1, row.Measurement, row.Note))
			verdict += fmt.Sprintf(" [%d]", len(notes))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", label, row.Measurement, row.Value, dash(row.Floor), dash(ratio), dash(row.Target), verdict)
	}
	tw.Flush()
	if len(notes) > 0 {
		fmt.Fprintln(w, "\nnotes:")
		for _, n := range notes {
			fmt.Fprintln(w, "  "+n)
		}
	}
	fmt.Fprintln(w, "\n"+r.summary())
}

func (r *Results) summary() string {
	counts := map[string]int{}
	for _, row := range r.Rows {
		counts[row.Verdict]++
	}
	return fmt.Sprintf("summary: %d pass, %d miss, %d N/A, %d info", counts[verdictPass], counts[verdictMiss], counts[verdictNA], counts[verdictInfo])
}

// WriteJSON writes the machine-readable results.
func (r *Results) WriteJSON(path string, meta map[string]any) error {
	body, err := json.MarshalIndent(map[string]any{"meta": meta, "rows": r.Rows}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(body, '\n'), 0o644)
}

func dash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}

func formatRatio(x float64) string {
	switch {
	case x >= 100:
		return fmt.Sprintf("%.0f×", x)
	case x >= 10:
		return fmt.Sprintf("%.1f×", x)
	default:
		return fmt.Sprintf("%.2f×", x)
	}
}
