package testutil

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Counter sums every series of the metric name in reg whose labels
// include labels: a counter's or gauge's value, a histogram's sample
// count. A metric nobody has touched yet reads 0.
func Counter(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	total := 0.0
	for _, m := range metricsNamed(t, reg, name) {
		if matches(m, labels) {
			total += value(m)
		}
	}
	return total
}

// Series reads the one series of name whose labels are exactly labels;
// found is false when it does not exist.
func Series(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) (v float64, found bool) {
	t.Helper()
	for _, m := range metricsNamed(t, reg, name) {
		if matches(m, labels) && len(m.GetLabel()) == len(labels) {
			return value(m), true
		}
	}
	return 0, false
}

func metricsNamed(t testing.TB, reg *prometheus.Registry, name string) []*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

// matches reports whether m carries every label of labels.
func matches(m *dto.Metric, labels map[string]string) bool {
	for k, v := range labels {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == k && lp.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
