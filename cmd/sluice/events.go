package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/sluicehq/sluice/admin"
	"github.com/sluicehq/sluice/catalog"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/events"
	"github.com/sluicehq/sluice/internal/webhook"
)

// eventsOf returns the process's events: logged, the budget ones audited
// in cat and counted, and sent to the configured webhooks (delivered by
// Events.Run).
func eventsOf(cfg *config.Config, cat *catalog.Catalog, m *admin.Metrics, log *slog.Logger) (*events.Events, error) {
	em := m.EventMetrics()
	var hooks *webhook.Dispatcher
	if len(cfg.Events.Webhooks) > 0 {
		var endpoints []webhook.Endpoint
		for i, w := range cfg.Events.Webhooks {
			secret := w.Secret(os.LookupEnv)
			if secret == "" {
				return nil, fmt.Errorf("events.webhooks[%d].secret_env: %s is not set", i, w.SecretEnv)
			}
			endpoints = append(endpoints, webhook.Endpoint{URL: w.URL, Events: w.Events, Secret: secret})
		}
		d, err := webhook.New(webhook.Options{Endpoints: endpoints, OnFailure: em.WebhookFailure, Logger: log})
		if err != nil {
			return nil, err
		}
		hooks = d
	}
	redact := func(s string) string { return admin.Redact(nil, slog.String("error", s)).Value.String() }
	return events.New(events.Options{Log: log, Audit: cat, Webhooks: hooks, OnWarning: em.BudgetWarning, Redact: redact}), nil
}
