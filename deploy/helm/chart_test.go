// Package helm holds the tests of the Helm chart in deploy/helm/sluice.
package helm

import (
	"bytes"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testenv"
)

const chart = "sluice"

// render runs helm template with the --set values and returns the
// manifests by kind and name, each decoded from YAML.
func render(t *testing.T, helm string, set ...string) (map[string]map[string]any, error) {
	t.Helper()
	args := []string{"template", "rel", chart}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(helm, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, errors.New(stderr.String())
	}
	out := map[string]map[string]any{}
	dec := yaml.NewDecoder(&stdout)
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("rendered manifests do not parse: %v\n%s", err, stdout.String())
		}
		if doc == nil {
			continue
		}
		kind, _ := doc["kind"].(string)
		meta, _ := doc["metadata"].(map[string]any)
		name, _ := meta["name"].(string)
		if kind == "" || name == "" || doc["apiVersion"] == nil {
			t.Fatalf("a manifest without apiVersion, kind or name: %v", doc)
		}
		out[kind+"/"+name] = doc
	}
	return out, nil
}

// get walks a decoded manifest: get(m, "spec", "template", 0, "name").
func get(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%v: not a map at %q", path, k)
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("%v: no item %d", path, k)
			}
			v = l[k]
		}
	}
	return v
}

// env returns a container's environment as a map.
func env(t *testing.T, container any) map[string]string {
	out := map[string]string{}
	list, _ := get(t, container, "env").([]any)
	for _, e := range list {
		m := e.(map[string]any)
		out[m["name"].(string)], _ = m["value"].(string)
	}
	return out
}

func TestChart_Lint(t *testing.T) {
	helm := testenv.Helm(t)
	for _, set := range [][]string{nil, {"replicas=3", "store=redis://redis:6379/0", "database=postgres://pg/sluice", "serviceMonitor.enabled=true"}} {
		args := []string{"lint", "--strict", chart}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		if out, err := exec.Command(helm, args...).CombinedOutput(); err != nil {
			t.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestChart_DefaultsRenderOneSQLitePod: one replica on a volume, replaced
// (not rolled) on upgrade, probes on /readyz and /healthz, a grace period
// past the drain, the config a valid sluice config, no ServiceMonitor.
func TestChart_DefaultsRenderOneSQLitePod(t *testing.T) {
	helm := testenv.Helm(t)
	m, err := render(t, helm)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Deployment/rel-sluice", "ConfigMap/rel-sluice", "Service/rel-sluice", "Service/rel-sluice-admin", "PersistentVolumeClaim/rel-sluice-data"} {
		if m[want] == nil {
			t.Errorf("no %s among %v", want, keys(m))
		}
	}
	if m["ServiceMonitor/rel-sluice"] != nil {
		t.Error("a ServiceMonitor by default")
	}
	d := m["Deployment/rel-sluice"]
	if r := get(t, d, "spec", "replicas"); r != 1 {
		t.Errorf("replicas %v", r)
	}
	if s := get(t, d, "spec", "strategy", "type"); s != "Recreate" {
		t.Errorf("strategy %v, want Recreate for SQLite", s)
	}
	pod := get(t, d, "spec", "template", "spec")
	if g, _ := get(t, pod, "terminationGracePeriodSeconds").(int); g <= 30 {
		t.Errorf("terminationGracePeriodSeconds %v, want more than the 30 s drain", g)
	}
	if get(t, pod, "securityContext", "runAsNonRoot") != true {
		t.Error("not runAsNonRoot")
	}
	c := get(t, pod, "containers", 0)
	if p := get(t, c, "readinessProbe", "httpGet", "path"); p != "/readyz" {
		t.Errorf("readiness %v", p)
	}
	if p := get(t, c, "livenessProbe", "httpGet", "path"); p != "/healthz" {
		t.Errorf("liveness %v", p)
	}
	e := env(t, c)
	if e["SLUICE_CONFIG"] != "/etc/sluice/sluice.yaml" || e["SLUICE_DATA_DIR"] != "/data" || e["SLUICE_ENV"] != "production" {
		t.Errorf("env %v", e)
	}
	if _, ok := e["SLUICE_STORE"]; ok {
		t.Errorf("SLUICE_STORE set by default: %v", e)
	}
	if s := get(t, c, "envFrom", 0, "secretRef", "name"); s != "rel-sluice" {
		t.Errorf("secret %v", s)
	}
	if claim := get(t, pod, "volumes", 1, "persistentVolumeClaim", "claimName"); claim != "rel-sluice-data" {
		t.Errorf("data volume %v", claim)
	}
	cfg, _ := get(t, m["ConfigMap/rel-sluice"], "data", "sluice.yaml").(string)
	if _, err := config.Parse([]byte(cfg), nil); err != nil {
		t.Errorf("the chart's default config: %v\n%s", err, cfg)
	}
}

// TestChart_ReplicasWithASharedStore: replicas on Redis and PostgreSQL roll,
// need no volume, and the ServiceMonitor scrapes the admin port with a token.
func TestChart_ReplicasWithASharedStore(t *testing.T) {
	helm := testenv.Helm(t)
	m, err := render(t, helm, "replicas=3", "store=redis://:$(REDIS_PASSWORD)@redis:6379/0", "database=postgres://pg/sluice",
		"serviceMonitor.enabled=true", "secretName=prod")
	if err != nil {
		t.Fatal(err)
	}
	d := m["Deployment/rel-sluice"]
	if r := get(t, d, "spec", "replicas"); r != 3 {
		t.Errorf("replicas %v", r)
	}
	if s := get(t, d, "spec", "strategy"); s != nil {
		t.Errorf("strategy %v, want the default rolling update", s)
	}
	if m["PersistentVolumeClaim/rel-sluice-data"] != nil {
		t.Error("a volume claim with no SQLite")
	}
	e := env(t, get(t, d, "spec", "template", "spec", "containers", 0))
	if e["SLUICE_STORE"] != "redis://:$(REDIS_PASSWORD)@redis:6379/0" || e["SLUICE_DATABASE"] != "postgres://pg/sluice" {
		t.Errorf("env %v", e)
	}
	sm := m["ServiceMonitor/rel-sluice"]
	if sm == nil {
		t.Fatalf("no ServiceMonitor among %v", keys(m))
	}
	ep := get(t, sm, "spec", "endpoints", 0)
	if get(t, ep, "port") != "admin" || get(t, ep, "path") != "/metrics" || get(t, ep, "authorization", "credentials", "name") != "prod" {
		t.Errorf("endpoint %v", ep)
	}
	if get(t, sm, "spec", "selector", "matchLabels", "app.kubernetes.io/component") != "admin" {
		t.Errorf("selector %v", get(t, sm, "spec", "selector"))
	}
}

// TestChart_Refusals: what the chart will not render, with the reason.
func TestChart_Refusals(t *testing.T) {
	helm := testenv.Helm(t)
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"replicas=2"}, "replicas: 2 needs a shared store"},
		{[]string{"replicas=2", "store=sqlite:///data/c.db"}, "replicas: 2 needs a shared store"},
		{[]string{"replicas=2", "store=redis://redis:6379/0"}, "replicas: 2 needs a shared database"},
		{[]string{"terminationGracePeriodSeconds=30"}, "must be longer than sluice's 30 s drain"},
	} {
		_, err := render(t, helm, tc.set...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want a refusal with %q", tc.set, err, tc.want)
		}
	}
	if _, err := render(t, helm, "replicas=2", "store=postgres://pg/s", "database=postgres://pg/s"); err != nil {
		t.Errorf("replicas=2 on PostgreSQL: %v", err)
	}
}

func keys(m map[string]map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
