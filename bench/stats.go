package main

import (
	"fmt"
	"sort"
	"time"
)

// Sample is a set of durations with percentile helpers.
type Sample []time.Duration

// Percentile returns the p-th percentile (0..100) by nearest rank.
func (s Sample) Percentile(p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	c := append(Sample(nil), s...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	i := int(p/100*float64(len(c))+0.5) - 1
	i = max(0, min(i, len(c)-1))
	return c[i]
}

func (s Sample) P50() time.Duration { return s.Percentile(50) }
func (s Sample) P99() time.Duration { return s.Percentile(99) }

// fmtDur prints a duration with a unit suited to its size.
func fmtDur(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + fmtDur(-d)
	case d < time.Millisecond:
		return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
}

func fmtRate(perSec float64) string {
	switch {
	case perSec >= 1e6:
		return fmt.Sprintf("%.2fM/s", perSec/1e6)
	case perSec >= 1e3:
		return fmt.Sprintf("%.1fk/s", perSec/1e3)
	default:
		return fmt.Sprintf("%.0f/s", perSec)
	}
}

func fmtMiB(bytes float64) string { return fmt.Sprintf("%.1f MiB", bytes/(1<<20)) }

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
