package admin

import "github.com/prometheus/client_golang/prometheus"

// EventMetrics counts Sluice's events: budget warnings (the first crossing
// of a threshold or soft limit in a period, per rule) and webhook
// deliveries given up (by reason: queue_full, attempts).
type EventMetrics struct {
	warnings        *prometheus.CounterVec
	webhookFailures *prometheus.CounterVec
}

// EventMetrics registers the event counters beside m's series. Call it
// once.
func (m *Metrics) EventMetrics() *EventMetrics {
	e := &EventMetrics{
		warnings: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_budget_warnings_total",
			Help: "Budget warnings reported: a warn_at threshold or soft limit first crossed in its period (per process), by rule."}, []string{"rule"}),
		webhookFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_webhook_failures_total",
			Help: "Webhook deliveries given up, by reason: queue_full (dropped at once) or attempts (every retry failed)."}, []string{"reason"}),
	}
	m.reg.MustRegister(e.warnings, e.webhookFailures)
	for _, r := range []string{"queue_full", "attempts"} {
		e.webhookFailures.WithLabelValues(r)
	}
	return e
}

// BudgetWarning counts a warning of rule.
func (e *EventMetrics) BudgetWarning(rule string) { e.warnings.WithLabelValues(rule).Inc() }

// WebhookFailure counts a delivery given up.
func (e *EventMetrics) WebhookFailure(reason string) { e.webhookFailures.WithLabelValues(reason).Inc() }
