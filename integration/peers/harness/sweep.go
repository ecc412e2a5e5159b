package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// runSweep runs the latency phase of the latency contenders among selected at each rate of
// -latency-sweep in turn (at each rate the floor first, with -latency-sweep-floor), prints
// which rates each contender sustained, and writes the report and the per-second series. It
// stops early after two rates in a row that no contender sustained. A rate not sustained is a
// measurement, not a failure: ok is false only when a run could not be measured at all.
func (h *harness) runSweep(ctx context.Context, selected []contender) (bool, error) {
	cfg := h.cfg
	cs := latencyContenders(selected)
	if len(cs) == 0 {
		return false, errors.New("-latency-sweep: no latency contender selected (sluice-auto, kstreams or a -sluice-variants one)")
	}
	ok := true
	missed := 0
	for i, rate := range cfg.sweepRates {
		tag := "-" + strconv.Itoa(rate)
		if cfg.sweepFloor {
			f := h.floorPhase(ctx, rate, 1, tag, false)
			logRun(f)
			h.sweep = append(h.sweep, f)
		}
		sustained := false
		for _, c := range cs {
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			r := h.latencyPhase(ctx, c, rate, 1, tag)
			logRun(r)
			h.sweep = append(h.sweep, r)
			sustained = sustained || r.sustained(cfg.sweepLimit)
			ok = ok && r.stats != nil
		}
		if sustained {
			missed = 0
		} else {
			missed++
		}
		if missed == 2 && i < len(cfg.sweepRates)-1 {
			logf("sweep: no contender sustained %d or %d rec/s; the higher rates are not run", cfg.sweepRates[i-1], rate)
			break
		}
	}
	title := fmt.Sprintf("p99 per second at each rate, %d keys", cfg.keys)
	csvPath, pngPath, err := h.writeSeries(h.sweep, "sweep", title, func(r latencyRun) string {
		return fmt.Sprintf("%s %d/s", r.name, r.rate)
	})
	if err != nil {
		logf("sweep series: %v", err)
	} else {
		h.seriesFiles = append(h.seriesFiles, csvPath, pngPath)
		logf("sweep series written to %s and %s", csvPath, pngPath)
	}
	rep := h.sweepReport(cs)
	fmt.Println(rep.table)
	if err := writeReport(cfg.out, rep.markdown); err != nil {
		return false, err
	}
	return ok, nil
}

// verdict says whether r sustained its rate, and if not why.
func (r latencyRun) verdict(limit time.Duration) string {
	if r.sustained(limit) {
		return "yes"
	}
	var why []string
	s := r.stats
	switch {
	case s == nil:
		return "no: " + shorten(firstLine(r.err), 160)
	case r.err != "":
		why = append(why, shorten(firstLine(r.err), 160))
	case s.seen < s.produced:
		why = append(why, fmt.Sprintf("%d records never seen", s.produced-s.seen))
	}
	if !r.reached() {
		why = append(why, fmt.Sprintf("rate not reached (%.0f rec/s)", s.rate))
	}
	if s.p99 >= limit {
		why = append(why, "p99 "+ms(s.p99))
	}
	return "no: " + strings.Join(why, "; ")
}

// sweepRows is the sweep's table: one row per run, with the floor's p99 at the same rate.
func sweepRows(runs []latencyRun, limit time.Duration) ([]string, [][]string) {
	header := []string{"target rec/s", "contender", "produced rec/s", "rate reached", "seen/live", "p50", "p99", "max",
		"floor p99", "load average", "sustained"}
	floorP99 := map[int]string{}
	for _, r := range runs {
		if r.name == floorName && r.stats != nil {
			floorP99[r.rate] = ms(r.stats.p99)
		}
	}
	var rows [][]string
	for _, r := range runs {
		if r.name == floorName {
			continue
		}
		row := []string{strconv.Itoa(r.rate), r.name, "-", "-", "-", "-", "-", "-", "-", r.load, r.verdict(limit)}
		if s := r.stats; s != nil {
			row[2] = fmt.Sprintf("%.0f", s.rate)
			row[3] = "yes"
			if !r.reached() {
				row[3] = "no"
			}
			row[4] = fmt.Sprintf("%d/%d", s.seen, s.produced)
			row[5], row[6], row[7] = ms(s.p50), ms(s.p99), ms(s.max)
		}
		if f, ok := floorP99[r.rate]; ok {
			row[8] = f
		}
		rows = append(rows, row)
	}
	return header, rows
}

// highestSustained names, per contender, the highest rate it sustained.
func highestSustained(cs []contender, runs []latencyRun, limit time.Duration) []string {
	var out []string
	for _, c := range cs {
		best, tried := 0, 0
		for _, r := range runs {
			if r.name != c.name {
				continue
			}
			tried++
			if r.sustained(limit) && r.rate > best {
				best = r.rate
			}
		}
		switch {
		case tried == 0:
		case best == 0:
			out = append(out, fmt.Sprintf("%s: no rate tried was sustained", c.name))
		default:
			out = append(out, fmt.Sprintf("%s: highest sustained rate %d rec/s (p99 under %s, every record seen, the rate reached)",
				c.name, best, limit))
		}
	}
	return out
}

// sweepReport renders the sweep.
func (h *harness) sweepReport(cs []contender) report {
	cfg := h.cfg
	header, rows := sweepRows(h.sweep, cfg.sweepLimit)
	best := highestSustained(cs, h.sweep, cfg.sweepLimit)
	var t strings.Builder
	fmt.Fprintf(&t, "\nlatency sweep (%d keys; each rate: %d-record catch-up, %s warm-up, %s measured):\n",
		cfg.keys, cfg.latBacklog, cfg.latWarmup, cfg.latDur)
	t.WriteString(plain(header, rows))
	for _, b := range best {
		t.WriteString("  " + b + "\n")
	}

	var m strings.Builder
	fmt.Fprintf(&m, "# sluice real-time latency sweep\n\nRun %s (UTC %s).\n\nCommand: `%s`\n\n", h.runID,
		time.Now().UTC().Format(time.RFC3339), h.commandLine())
	fmt.Fprintf(&m, "At each rate, each contender runs alone on a topic of its own (%d partitions): it catches up a %d-record "+
		"backlog (%d keys), is warmed up with the same live load for %s (not counted) until it has committed it, then %s of "+
		"live load at the rate is measured: a record's latency is from its produce call to the first read_committed output "+
		"of its key whose count covers it. A rate is **sustained** when p99 stays under %s, every live record becomes "+
		"visible (within 30 s of the load's end) and the producer reaches the rate (97%% of it). The floor is the same "+
		"load read back from its own topic with no processing, at the same rate.\n\n",
		cfg.partitions, cfg.latBacklog, cfg.keys, cfg.latWarmup, cfg.latDur, cfg.sweepLimit)
	m.WriteString("## Machine\n\n")
	for _, l := range machine() {
		m.WriteString("- " + l + "\n")
	}
	m.WriteString("\n## Versions\n\n")
	for _, l := range h.versions() {
		m.WriteString("- " + l + "\n")
	}
	m.WriteString("\n## Sweep\n\n")
	m.WriteString(markdown(header, rows))
	m.WriteString("\n")
	for _, b := range best {
		m.WriteString("- " + b + "\n")
	}
	m.WriteString("\nSettings:\n\n")
	for _, c := range cs {
		fmt.Fprintf(&m, "- **%s**: %s\n", c.name, c.setup)
	}
	if len(h.seriesFiles) > 0 {
		m.WriteString("\nPer-second p50/p99/max of every run (CSV) and the p99 per second (PNG): " +
			strings.Join(h.seriesFiles, ", ") + "\n")
	}
	return report{table: t.String(), markdown: m.String()}
}
