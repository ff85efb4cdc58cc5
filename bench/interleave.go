package main

import (
	"fmt"
	"sort"
	"time"
)

// A ratio against a floor measured once, minutes before or after what it
// judges, depends on that one measurement: on a shared machine a floor
// taken in a noisy second can be several times its usual value and turn a
// miss into a pass. So the rows judged against a pipe floor measure the
// floor and the subject in alternating blocks (floor, subject, floor,
// subject, …) on the same floor process, and their ratio is the median of
// the blocks' ratios of p50s: one noisy block moves it by one place.

// floorBlocks is how many alternating blocks a judged row is split into.
func (e *Env) floorBlocks() int { return e.n(40, 8) }

// paired is a subject measured in alternating blocks with its floor.
type paired struct {
	Subject, Floor Sample    // every sample of each, for percentiles
	Ratios         []float64 // per block: p50 of the subject over p50 of the floor
	Tries          int       // how many times it was measured (interleaveGo)
}

// Ratio is the median of the per-block ratios.
func (p paired) Ratio() float64 { return median(p.Ratios) }

// Spread is the smallest and the largest per-block ratio, for notes.
func (p paired) Spread() string {
	if len(p.Ratios) == 0 {
		return ""
	}
	s := append([]float64(nil), p.Ratios...)
	sort.Float64s(s)
	text := fmt.Sprintf("%d blocks, %s–%s", len(s), formatRatio(s[0]), formatRatio(s[len(s)-1]))
	if p.Tries > 1 {
		text += fmt.Sprintf(", measured %d times (the floor of the earlier tries was inflated)", p.Tries)
	}
	return text
}

// Raw is the pair's figures for results.json.
func (p paired) Raw() map[string]float64 {
	m := map[string]float64{"p50_us": us(p.Subject.P50()), "p99_us": us(p.Subject.P99()),
		"floor_p50_us": us(p.Floor.P50()), "floor_p99_us": us(p.Floor.P99()), "ratio_median": p.Ratio(), "blocks": float64(len(p.Ratios))}
	if len(p.Ratios) > 0 {
		s := append([]float64(nil), p.Ratios...)
		sort.Float64s(s)
		m["ratio_min"], m["ratio_max"] = s[0], s[len(s)-1]
	}
	return m
}

// interleave measures n samples of subject and of the floor in blocks
// alternating between the two (floor first), each block after warm
// untimed rounds (the first after firstWarm). floor(w, k) and subject(w,
// k) make w untimed rounds and return k timed samples.
func interleave(blocks, firstWarm, warm, n int, floor, subject func(warm, k int) (Sample, error)) (paired, error) {
	var p paired
	per := max(n/blocks, 1)
	for b := range blocks {
		w := warm
		if b == 0 {
			w = firstWarm
		}
		f, err := floor(w, per)
		if err != nil {
			return p, fmt.Errorf("pipe floor: %w", err)
		}
		s, err := subject(w, per)
		if err != nil {
			return p, err
		}
		p.Floor, p.Subject = append(p.Floor, f...), append(p.Subject, s...)
		p.Ratios = append(p.Ratios, ratio(float64(s.P50()), float64(f.P50())))
	}
	return p, nil
}

// inflatedFloor is how many times row 1's p50 an interleaved floor's p50
// may be before its row says the verdict rests on an inflated floor.
// Alternating blocks do not help when the floor process itself stays slow
// for seconds while what it judges is not (seen on the loaded 2-core
// machine: a Go floor of 35 µs for a whole row, with row 1 at 9.6 µs and
// the runs it judged at their usual 29 µs). A Python floor is normally
// about row 1's, a Node floor about twice it.
const inflatedFloor = 3

// floorWarning is the note for a row whose interleaved floor p50 is more
// than inflatedFloor times row 1's, or "".
func (e *Env) floorWarning(floorP50 time.Duration) string {
	base := e.GoFloor.P50()
	if base <= 0 || floorP50 <= inflatedFloor*base {
		return ""
	}
	return fmt.Sprintf("; the floor was %s row 1's (%s): this verdict rests on an inflated floor",
		formatRatio(float64(floorP50)/float64(base)), fmtDur(base))
}

// interleaveGo is interleave against the Go floor, measured again, twice
// at most, while its floor comes out inflated.
func (e *Env) interleaveGo(firstWarm, warm, n int, subject func(warm, k int) (Sample, error)) (paired, error) {
	var p paired
	var err error
	for try := 1; try <= 3; try++ {
		p, err = interleave(e.floorBlocks(), firstWarm, warm, n, e.goFloorBlock, subject)
		p.Tries = try
		if err != nil || e.floorWarning(p.Floor.P50()) == "" {
			break
		}
	}
	return p, err
}

// goFloorBlock is a block of the Go pipe floor on the run's echo child.
func (e *Env) goFloorBlock(warm, k int) (Sample, error) {
	if e.echo == nil {
		return nil, fmt.Errorf("no echo child (row 1 did not start)")
	}
	return e.echo.pingPong(floorMessage(), warm, k)
}

// timedBlock turns a call into a block function: warm untimed calls, then
// k timed ones.
func timedBlock(call func() error) func(warm, k int) (Sample, error) {
	return func(warm, k int) (Sample, error) {
		for range warm {
			if err := call(); err != nil {
				return nil, err
			}
		}
		s := make(Sample, 0, k)
		for range k {
			t := time.Now()
			if err := call(); err != nil {
				return nil, err
			}
			s = append(s, time.Since(t))
		}
		return s, nil
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
