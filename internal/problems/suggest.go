package problems

import (
	"sort"
	"strings"
)

// DidYouMean is " (did you mean X?)" for the known names nearest to typed
// by edit distance, or "" when none is near enough to be a likely typo.
// A name is near when its distance is at most 2 and at most half of
// typed's length, so "ulr" finds "url" but "tls" does not find "url".
// Several names at the same distance are all offered.
func DidYouMean(typed string, known []string, qualify func(string) string) string {
	best, picks := -1, []string(nil)
	for _, k := range known {
		d := editDistance(typed, k)
		if d > 2 || 2*d > len(typed) {
			continue
		}
		switch {
		case best < 0 || d < best:
			best, picks = d, []string{k}
		case d == best:
			picks = append(picks, k)
		}
	}
	if len(picks) == 0 {
		return ""
	}
	sort.Strings(picks)
	for i, p := range picks {
		picks[i] = qualify(p)
	}
	return " (did you mean " + strings.Join(picks, " or ") + "?)"
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and transpositions of two adjacent bytes each
// cost 1, so "ulr" is 1 from "url" and "timout" 1 from "timeout".
func editDistance(a, b string) int {
	// d[i][j] is the distance between a[:i] and b[:j].
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
