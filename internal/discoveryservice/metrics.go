package discoveryservice

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the Service's own registry (not the global one), so that several Services in
// one process (tests) do not collide.
type metrics struct {
	registry   *prometheus.Registry
	requests   *prometheus.CounterVec
	rejections *prometheus.CounterVec
}

func newMetrics(st *store) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "discovery_requests_total",
			Help: "Requests received, by gRPC method.",
		}, []string{"method"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "discovery_rejections_total",
			Help: "Requests refused, by reason (invalid, rate, clusters, affiliates, endpoints, lagging).",
		}, []string{"reason"}),
	}

	// Every series from the start, so that a rate over a counter that was zero is not missing.
	for _, method := range []string{"Hello", "AffiliateUpdate", "AffiliateDelete", "List", "Watch"} {
		m.requests.WithLabelValues(method)
	}

	for _, reason := range []string{"invalid", "rate", "clusters", "affiliates", "endpoints", "lagging"} {
		m.rejections.WithLabelValues(reason)
	}

	gauge := func(name, help string, pick func(clusters, affiliates, subscriptions int) int) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			return float64(pick(st.counts()))
		})
	}

	m.registry.MustRegister(m.requests, m.rejections,
		gauge("discovery_clusters", "Clusters with at least one affiliate.", func(c, _, _ int) int { return c }),
		gauge("discovery_affiliates", "Affiliates stored, over all clusters.", func(_, a, _ int) int { return a }),
		gauge("discovery_subscriptions", "Open Watch streams.", func(_, _, s int) int { return s }),
	)

	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}
