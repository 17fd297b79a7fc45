package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/gateway"
	"github.com/sluicehq/sluice/internal/mockprovider"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/store/memstore"
	"go.yaml.in/yaml/v3"
)

const (
	dashboardFile = "../deploy/grafana/sluice.json"
	alertsFile    = "../deploy/prometheus/alerts.yml"
	readmeFile    = "../docs/operating.md"
)

type oneKey struct{}

func (oneKey) Authenticate(_ context.Context, secret string) (gateway.Principal, error) {
	if secret != "sk-dash" {
		return gateway.Principal{}, gateway.ErrBadKey
	}
	return gateway.Principal{KeyID: "k1", Org: "default", Workspace: "acme", User: "ada"}, nil
}

// unavailable is a limit store whose admissions fail.
type unavailable struct{ sluice.Store }

func (unavailable) Admit(context.Context, time.Time, sluice.Batch, []sluice.ChargeResult) (bool, error) {
	return false, errors.New("connection refused")
}

// startGateway serves a gateway over the mock provider whose limiter's
// store is store, observed by m.
func startGateway(t *testing.T, m *Metrics, store sluice.Store, rules []sluice.Rule, watch bool) string {
	t.Helper()
	upstream := httptest.NewServer(mockprovider.New(mockprovider.Options{}))
	t.Cleanup(upstream.Close)
	l, err := sluice.New(sluice.Options{Store: m.Store(store), Rules: rules, OnOverrun: m.OnOverrun})
	if err != nil {
		t.Fatal(err)
	}
	if watch {
		m.WatchHeadroom(l, []HeadroomWorkspace{{Org: "default", Workspace: "acme"}})
	}
	g, err := gateway.New(gateway.Options{Limiter: l, Keys: oneKey{}, Observer: m.Observe,
		Models:    []gateway.Model{{Name: "mock-small", Provider: "mock", Price: sluice.Price{Input: 150_000, Output: 600_000}, MaxOutputTokens: 256}},
		Providers: []gateway.Provider{{Name: "mock", Kind: gateway.KindMock, BaseURL: upstream.URL}}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := g.Server()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

func chat(t *testing.T, url, body string, want int) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer sk-dash")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != want {
		t.Fatalf("%s: status %d, want %d", body, resp.StatusCode, want)
	}
}

// TestDeploy_DashboardAndAlertsNameScrapedSeries drives a gateway through
// admitted, streamed, refused, shadowed and failed-open calls, scrapes
// /metrics, and checks that every series the Grafana dashboard and the
// alert rules name is exported, with the type their suffix implies.
func TestDeploy_DashboardAndAlertsNameScrapedSeries(t *testing.T) {
	m := NewMetrics(MetricsOptions{Models: map[string]string{"mock-small": "mock-small"}, Providers: []string{"mock"}})
	rules := []sluice.Rule{
		{Name: "global_cost", Kind: sluice.KindBudget, Subject: "global", Metric: sluice.MetricCost, Limit: 1_000_000_000, Period: sluice.PeriodDay},
		{Name: "daily_tokens", Kind: sluice.KindBudget, Subject: "workspace", Metric: sluice.MetricTokens, Limit: 2000, Period: sluice.PeriodDay},
		{Name: "trial_rpm", Kind: sluice.KindRate, Subject: "key", Limit: 1, Window: time.Hour, Mode: sluice.ModeShadow},
	}
	url := startGateway(t, m, memstore.New(memstore.Options{}), rules, true)
	chat(t, url, `{"model":"mock-small","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`, 200)
	chat(t, url, `{"model":"mock-small","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, 200)
	chat(t, url, `{"model":"mock-small","max_tokens":16,"messages":[{"role":"user","content":"[mock status=503] hi"}]}`, 503)
	// A prompt larger than the whole daily budget never fits.
	chat(t, url, `{"model":"mock-small","max_tokens":16,"messages":[{"role":"user","content":"`+strings.Repeat("word ", 2000)+`"}]}`, 413)
	open := []sluice.Rule{{Name: "open_rpm", Kind: sluice.KindRate, Subject: "key", Limit: 10, Window: time.Minute, OnStoreError: sluice.StoreErrorOpen}}
	chat(t, startGateway(t, m, unavailable{memstore.New(memstore.Options{})}, open, false),
		`{"model":"mock-small","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`, 200)

	var families map[string]*dto.MetricFamily
	deadline := time.Now().Add(5 * time.Second)
	for {
		families = scrapeHandler(t, m.Handler())
		// Each call's event comes once its answer is out (a stream's once
		// it is settled), on the gateway's own time.
		if value(families, "sluice_requests_total", "outcome", "admitted") >= 3 &&
			value(families, "sluice_fail_open_admissions_total", "rule", "open_rpm") >= 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	names := map[string][]string{} // series name -> files naming it
	for _, file := range []string{dashboardFile, alertsFile, readmeFile} {
		for _, expr := range expressions(t, file) {
			for _, n := range seriesName.FindAllString(expr, -1) {
				if !slices.Contains(names[n], file) {
					names[n] = append(names[n], file)
				}
			}
		}
	}
	if len(names) < 20 {
		t.Fatalf("found only %d series names in the dashboard and the rules: %v", len(names), names)
	}
	for name, files := range names {
		if f := families[name]; f != nil && len(f.GetMetric()) > 0 {
			continue
		}
		base, suffix := name, ""
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			if strings.HasSuffix(name, s) {
				base, suffix = strings.TrimSuffix(name, s), s
			}
		}
		if f := families[base]; suffix != "" && f != nil && f.GetType() == dto.MetricType_HISTOGRAM && len(f.GetMetric()) > 0 {
			continue
		}
		t.Errorf("%v name %s, which /metrics does not export", files, name)
	}
}

var seriesName = regexp.MustCompile(`\bsluice_[a-z0-9_]+`)

// expressions returns the PromQL of a dashboard's targets and templating,
// or of a rule file's rules.
func expressions(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	if strings.HasSuffix(file, ".md") {
		return readmeQueries(string(data))
	}
	if strings.HasSuffix(file, ".json") {
		var d struct {
			Panels []struct {
				Targets []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
			Templating struct {
				List []struct {
					Definition string `json:"definition"`
				} `json:"list"`
			} `json:"templating"`
		}
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				out = append(out, tg.Expr)
			}
		}
		for _, v := range d.Templating.List {
			out = append(out, v.Definition)
		}
		return out
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Expr string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out = append(out, r.Expr)
		}
	}
	return out
}

func scrapeHandler(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Accept", "text/plain")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return families
}

// promtool runs Prometheus's promtool, which .ci/run installs from
// Debian's prometheus package; without it the test skips (testenv's
// gate), except in CI.
func promtool(t *testing.T, args ...string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		testenv.Missing(t, "promtool is not installed", "install promtool (Debian's prometheus package)")
	}
	out, err := exec.Command(path, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func TestDeploy_PromtoolChecksAndTestsTheAlertRules(t *testing.T) {
	promtool(t, "check", "rules", alertsFile)
	promtool(t, "test", "rules", filepath.Join(filepath.Dir(alertsFile), "alerts_test.yml"))
}

// readmeQueries returns the queries of a document's promql code blocks,
// one per line not a comment, a line indented under it continuing it.
func readmeQueries(doc string) []string {
	var out []string
	for _, block := range strings.Split(doc, "```promql\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		for _, line := range strings.Split(block, "\n") {
			switch {
			case strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#"):
			case strings.HasPrefix(line, " ") && len(out) > 0:
				out[len(out)-1] += " " + strings.TrimSpace(line)
			default:
				out = append(out, line)
			}
		}
	}
	return out
}

// The README's queries are valid PromQL: promtool checks them as
// recording rules.
func TestDeploy_ReadmeQueriesArePromQL(t *testing.T) {
	data, err := os.ReadFile(readmeFile)
	if err != nil {
		t.Fatal(err)
	}
	queries := readmeQueries(string(data))
	if len(queries) < 5 {
		t.Fatalf("found %d queries in the README: %q", len(queries), queries)
	}
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	for i, q := range queries {
		rules = append(rules, rule{Record: fmt.Sprintf("readme:query_%d", i), Expr: q})
	}
	out, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "readme", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "readme.yml")
	if err := os.WriteFile(file, out, 0o600); err != nil {
		t.Fatal(err)
	}
	promtool(t, "check", "rules", file)
}
