"""What the service measures and forecasts: Prometheus metrics, fleet metrics, demand forecasts."""
