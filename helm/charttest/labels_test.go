package charttest

import (
	"strings"
	"testing"
)

// TestLabelsClashingWithSelector: a user label map that holds one of the
// selector label keys would put that key twice in the same labels (helm
// renders it; the strict decode and the API server do not take it), so the
// render fails and says which value, why, and what to use instead.
func TestLabelsClashingWithSelector(t *testing.T) {
	const selects = "Deployment selects its pods by that label, and a Deployment's selector cannot change after install"
	const instead = "Put your value under another key (app.kubernetes.io/part-of: orders, or your own app: orders)"
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--set-json", `podLabels={"app.kubernetes.io/name":"orders"}`},
			[]string{"podLabels.app.kubernetes.io/name: the chart sets app.kubernetes.io/name=dedupe-proxy on the pods itself", selects, instead, "set nameOverride"}},
		{[]string{"--set-json", `podLabels={"tier":"worker","app.kubernetes.io/instance":"orders"}`},
			[]string{"podLabels.app.kubernetes.io/instance: the chart sets app.kubernetes.io/instance=ci on the pods itself", selects, instead, "the chart's value is the release name"}},
		{[]string{"--set-json", `additionalLabels={"app.kubernetes.io/name":"orders"}`},
			[]string{"additionalLabels.app.kubernetes.io/name: the chart sets app.kubernetes.io/name=dedupe-proxy on the pods itself", selects, instead, "set nameOverride"}},
		{[]string{"--set-json", `additionalLabels={"app.kubernetes.io/instance":"orders"}`},
			[]string{"additionalLabels.app.kubernetes.io/instance: the chart sets app.kubernetes.io/instance=ci", selects, instead, "release name"}},
		// The value nameOverride gives the label is the one the key clashes with.
		{[]string{"--set", "nameOverride=orders", "--set-json", `podLabels={"app.kubernetes.io/name":"orders"}`},
			[]string{"podLabels.app.kubernetes.io/name: the chart sets app.kubernetes.io/name=orders on the pods itself"}},
		// Mode shared renders no pod, but additionalLabels is on every object.
		{[]string{"--set", "mode=shared", "--set-json", `additionalLabels={"app.kubernetes.io/name":"orders"}`},
			[]string{"additionalLabels.app.kubernetes.io/name: the chart sets app.kubernetes.io/name=dedupe-proxy on every object it renders, so the key would be there twice", instead, "set nameOverride"}},
	} {
		_, err := Template(chartDir, "ci", "", tc.args...)
		if err == nil {
			t.Errorf("%v: rendered, want a failure", tc.args)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: got %v, want an error containing %q", tc.args, err, w)
			}
		}
	}
}

// TestLabelsBesideSelector: labels under other keys render once, the pods'
// only on the pods; nameOverride, the way the error names to change the
// name label, changes it in the pods and every selector alike. Mode shared
// renders no pod, so podLabels there clashes with nothing.
func TestLabelsBesideSelector(t *testing.T) {
	// render decodes strictly: a key twice in one map fails it.
	objs := render(t, "", "--set-json", `podLabels={"app":"orders","app.kubernetes.io/part-of":"orders"}`,
		"--set-json", `additionalLabels={"team":"payments"}`)
	d := objs.Deployments[0]
	for k, v := range map[string]string{"app": "orders", "app.kubernetes.io/part-of": "orders", "team": "payments", "app.kubernetes.io/name": "dedupe-proxy"} {
		if got := d.Spec.Template.Labels[k]; got != v {
			t.Errorf("pod label %s = %q, want %q", k, got, v)
		}
	}
	if _, ok := d.Labels["app"]; ok {
		t.Errorf("podLabels on the Deployment itself: %v", d.Labels)
	}
	if len(d.Spec.Selector.MatchLabels) != 2 {
		t.Errorf("Deployment selector %v, want the two selector labels", d.Spec.Selector.MatchLabels)
	}

	objs = render(t, "", "--set", "nameOverride=orders")
	d = objs.Deployments[0]
	if got := d.Spec.Template.Labels["app.kubernetes.io/name"]; got != "orders" {
		t.Errorf("nameOverride=orders: pod label app.kubernetes.io/name = %q", got)
	}
	if got := d.Spec.Selector.MatchLabels["app.kubernetes.io/name"]; got != "orders" {
		t.Errorf("nameOverride=orders: selector app.kubernetes.io/name = %q", got)
	}
	checkSelectors(t, d, objs, adminService(t, objs))

	render(t, "", "--set", "mode=shared", "--set-json", `podLabels={"app.kubernetes.io/name":"orders"}`)
}

// TestLabelsSetTwice: the chart's other labels, and a key of
// additionalLabels in podLabels, would also be written twice in the same
// labels; the render fails and names the value.
func TestLabelsSetTwice(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--set-json", `podLabels={"app.kubernetes.io/version":"2.3"}`}, "podLabels.app.kubernetes.io/version: the chart sets app.kubernetes.io/version="},
		{[]string{"--set-json", `podLabels={"app.kubernetes.io/managed-by":"me"}`}, "podLabels.app.kubernetes.io/managed-by: the chart sets app.kubernetes.io/managed-by=Helm on every object it renders, so the key would be there twice"},
		{[]string{"--set-json", `additionalLabels={"helm.sh/chart":"x"}`}, "additionalLabels.helm.sh/chart: the chart sets helm.sh/chart="},
		{[]string{"--set", "mode=shared", "--set-json", `additionalLabels={"helm.sh/chart":"x"}`}, "additionalLabels.helm.sh/chart: the chart sets helm.sh/chart="},
		{[]string{"--set-json", `podLabels={"team":"a"}`, "--set-json", `additionalLabels={"team":"b"}`}, "podLabels.team: additionalLabels.team puts it on the pods too, so the key would be there twice. Set it in one of the two"},
	} {
		_, err := Template(chartDir, "ci", "", tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
	// Mode shared renders no pod: podLabels meets additionalLabels nowhere.
	render(t, "", "--set", "mode=shared", "--set-json", `podLabels={"team":"a"}`, "--set-json", `additionalLabels={"team":"b"}`)
}
